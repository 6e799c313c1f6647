"""The Kafka ACLs of each component (least privilege), printed as kafka-acls.sh commands and,
with ``--apply``, added to the local secured broker.

    python -m scripts.kafka_acls            # print the commands (for operators to copy)
    python -m scripts.kafka_acls --apply    # also add them (KAFKA_SECURITY=sasl_ssl broker)
    make kafka-acls                         # the same, on the secured broker of $KAFKA_PORT

The resource names come from the worker's own settings (``DEDUPE_APP_ID``,
``DEDUPE_INPUT_TOPIC``, ...; docs/settings.md), so the ACLs name exactly the topics, group and
transactional ids that pipeline uses. What you should see: one ``kafka-acls.sh --add`` command
per line, e.g.

    kafka-acls.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties --add \\
      --allow-principal User:dedupe-worker --operation Read --operation Describe \\
      --topic events --topic dedupe-events-repartition ...

Each principal gets only what its component does (docs/security.md explains each line):

- the worker reads its input, repartition, changelog and Faust's leader topic (and the output
  topic, where ``GET /messages/{id}`` finds an id's forwarded copy, and the dead-letter topic,
  whose leaders the hanging-transaction repair asks about open transactions), writes the
  output, dead-letter, repartition and changelog topics inside transactions whose ids start with
  ``<app id>-<input topic>-``, uses its group ``<app id>``, reads the configs of its topics
  (DescribeConfigs: the start-up check of app/admin/topic_safety.py), and creates its own topics
  (or, with ``--no-create``, an operator creates them first and the worker keeps Create only on
  Faust's leader topic, which Faust declares at every start);
- the ingest service writes the input topic (its idempotent producer needs Write on a topic
  since Kafka 3.0, KIP-679; no IdempotentWrite on the cluster);
- the Spark job reads the clean topic (no group: its source assigns partitions and keeps its
  offsets in its checkpoint).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.admin.topic_safety import AUTO_REPLICATION, wanted_min_insync, wanted_replication
from app.admin.topics import topic_specs
from app.settings import Settings
from tables.producers import changelog_topic_name as producers_changelog_name
from tables.seen_ids.table import changelog_topic_name

KAFKA_SCRIPT = Path(__file__).resolve().parent / "kafka-local.sh"


@dataclass(frozen=True)
class Acl:
    """Allow ``principal`` the ``operations`` on each resource (type, names, pattern)."""

    principal: str
    operations: tuple[str, ...]
    resource: str  # topic | group | transactional-id | cluster
    names: tuple[str, ...] = ()
    prefixed: bool = False

    def args(self) -> list[str]:
        """The arguments of ``kafka-acls.sh --add`` for this rule."""
        out = ["--add", "--allow-principal", f"User:{self.principal}"]
        for op in self.operations:
            out += ["--operation", op]
        if self.resource == "cluster":
            out.append("--cluster")
        for name in self.names:
            out += [f"--{self.resource}", name]
        if self.prefixed:
            out += ["--resource-pattern-type", "prefixed"]
        return out

    def bindings(self) -> list[str]:
        """One line per (operation, resource) for ``kafka-local.sh add-acls`` (AddAcls.java)."""
        names = ("kafka-cluster",) if self.resource == "cluster" else self.names
        kind = self.resource.upper().replace("-", "_")
        pattern = "PREFIXED" if self.prefixed else "LITERAL"
        return [
            f"User:{self.principal}\t{_constant(op)}\t{kind}\t{name}\t{pattern}"
            for op in self.operations
            for name in names
        ]


def _constant(operation: str) -> str:
    """Kafka's enum name of an operation: ``DescribeConfigs`` -> ``DESCRIBE_CONFIGS``."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(operation)).upper()


def leader_topic_name(settings: Settings) -> str:
    """Faust's leader-election topic (its LeaderAssignor creates and reads it)."""
    return f"{settings.app_id}-__assignor-__leader"


def changelogs(settings: Settings) -> list[str]:
    """The changelog topics of the worker's tables (seen ids, producer sequences)."""
    return [changelog_topic_name(settings), producers_changelog_name(settings)]


def worker_topics(settings: Settings) -> list[str]:
    """Every topic the worker creates when missing (app/admin/topics.py, and Faust's leader
    topic)."""
    return [
        settings.input_topic,
        settings.repartition_topic,
        *changelogs(settings),
        settings.output_topic,
        settings.dlq_topic,
        leader_topic_name(settings),
    ]


def worker_acls(settings: Settings, user: str, *, create: bool = True) -> list[Acl]:
    tables = tuple(changelogs(settings))
    # The output topic too: GET /messages/{id} reads the id's forwarded copy (app/web/lookup.py);
    # and every topic it writes: the hanging-transaction repair asks their leaders which
    # producers hold transactions open (DescribeProducers, app/eos/hanging.py).
    read = (
        settings.input_topic,
        settings.repartition_topic,
        *tables,
        leader_topic_name(settings),
        settings.output_topic,
        settings.dlq_topic,
    )
    write = (settings.output_topic, settings.dlq_topic, settings.repartition_topic, *tables)
    acls = [
        Acl(user, ("Read", "Describe"), "topic", read),
        Acl(user, ("Write", "Describe"), "topic", write),
        Acl(user, ("Read", "Describe"), "group", (settings.app_id,)),
        Acl(
            user,
            ("Write", "Describe"),
            "transactional-id",
            (f"{settings.app_id}-{settings.input_topic}-",),
            prefixed=True,
        ),
    ]
    # The start-up check of replication and configs (app/admin/topic_safety.py) reads them.
    checked = tuple(t for t in worker_topics(settings) if t != leader_topic_name(settings))
    acls.append(Acl(user, ("DescribeConfigs",), "topic", checked))
    # Faust declares its leader topic at every start, and the broker refuses even the create of
    # an existing topic to a principal without Create on it: that one Create stays.
    created = worker_topics(settings) if create else [leader_topic_name(settings)]
    acls.append(Acl(user, ("Create",), "topic", tuple(created)))
    return acls


def ingest_acls(settings: Settings, user: str) -> list[Acl]:
    return [Acl(user, ("Write", "Describe"), "topic", (settings.input_topic,))]


def spark_acls(settings: Settings, user: str) -> list[Acl]:
    # No group: Spark's Kafka source assigns partitions itself and keeps its offsets in its
    # checkpoint (tests/security reads the clean topic with this ACL alone).
    return [Acl(user, ("Read", "Describe"), "topic", (settings.output_topic,))]


def all_acls(
    settings: Settings,
    *,
    worker: str = "dedupe-worker",
    ingest: str = "dedupe-ingest",
    spark: str = "dedupe-spark",
    create: bool = True,
) -> list[Acl]:
    """The ACLs of the three components of the pipeline of ``settings``."""
    return (
        worker_acls(settings, worker, create=create)
        + ingest_acls(settings, ingest)
        + spark_acls(settings, spark)
    )


def topic_commands(settings: Settings) -> list[str]:
    """kafka-topics.sh commands that create the worker's topics as it would
    (app/admin/topics.py)."""
    base = "kafka-topics.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties"
    out = []
    seen_ids, *more = changelogs(settings)
    # "auto" as on a cluster of three or more brokers, the production shape these are for.
    replication = wanted_replication(settings, AUTO_REPLICATION)
    safe = {
        "min.insync.replicas": str(wanted_min_insync(settings, replication)),
        "unclean.leader.election.enable": "false",
    }
    for spec in topic_specs(settings, seen_ids, more):
        configs = "".join(f" --config {k}={v}" for k, v in (spec.config | safe).items())
        out.append(
            f"{base} --create --topic {spec.name} --partitions {settings.partitions} "
            f"--replication-factor {replication}{configs}"
        )
    out.append(
        f"{base} --create --topic {leader_topic_name(settings)} --partitions 1 "
        f"--replication-factor {replication}"
    )
    return out


def apply(acls: list[Acl], env: Mapping[str, str] | None = None) -> None:
    """Add ``acls`` to the local secured broker of ``KAFKA_PORT`` in ``env`` (one Admin call)."""
    with tempfile.NamedTemporaryFile("w", suffix=".tsv") as listing:
        listing.write("".join(line + "\n" for acl in acls for line in acl.bindings()))
        listing.flush()
        result = subprocess.run(
            [str(KAFKA_SCRIPT), "add-acls", listing.name],
            env=dict(env if env is not None else os.environ, KAFKA_SECURITY="sasl_ssl"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"adding the ACLs failed:\n{result.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-user", default="dedupe-worker")
    parser.add_argument("--ingest-user", default="dedupe-ingest")
    parser.add_argument("--spark-user", default="dedupe-spark")
    parser.add_argument(
        "--no-create",
        action="store_true",
        help="the worker gets no Create: an operator creates its topics first",
    )
    parser.add_argument("--apply", action="store_true", help="add them to the local broker")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    acls = all_acls(
        settings,
        worker=args.worker_user,
        ingest=args.ingest_user,
        spark=args.spark_user,
        create=not args.no_create,
    )
    for acl in acls:
        print(
            "kafka-acls.sh --bootstrap-server $BOOTSTRAP --command-config admin.properties "
            + shlex.join(acl.args())
        )
    if args.no_create:  # what the operator creates instead of the worker
        for command in topic_commands(settings):
            print(command)
    if args.apply:
        apply(acls)
        print(f"added {len(acls)} ACL rules", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
