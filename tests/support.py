"""Test harness: the real broker, its topics, fresh names per test.

The worker processes and waiting for them to drain are in ``tests/workers.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from scripts.topic_admin import delete_topics_containing

ROOT = Path(__file__).resolve().parent.parent

KAFKA_SCRIPT = ROOT / "scripts" / "kafka-local.sh"


@dataclass(frozen=True)
class Runtime:
    """Which Python, directory and user a component process runs with: the repository's
    virtualenv as the test run's user in every tier; an image's virtualenv, WORKDIR and USER
    in tests/image."""

    python: str = sys.executable
    cwd: Path = ROOT
    user: tuple[int, int] | None = None  # uid, gid

    def popen(
        self, module: Sequence[str], env: Mapping[str, str], log: IO[bytes], **extra: Any
    ) -> subprocess.Popen[bytes]:
        """``python -m <module...>`` with its output in ``log``."""
        if self.user is not None:
            extra.update(user=self.user[0], group=self.user[1], extra_groups=[])
        return subprocess.Popen(
            [self.python, "-m", *module],
            env=dict(env),
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            **extra,
        )


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    port: int

    def script(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KAFKA_PORT=str(self.port))
        return subprocess.run(
            [str(KAFKA_SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def alter_configs(self, *entity_and_change: str) -> None:
        """``kafka-configs --alter`` on this broker, e.g. ``("--entity-type", "topics",
        "--entity-name", t, "--add-config", "k=v")``; fails the test when it is refused."""
        result = self.script(
            "configs", "--bootstrap-server", self.bootstrap, "--alter", *entity_and_change
        )
        assert result.returncode == 0, result.stdout + result.stderr


def delete_topics_after(broker: Broker, names: Names) -> None:
    """A test's topics deleted (its teardown): a broker restarted after a kill -9 recovers
    every partition it holds, so partitions left by earlier tests slow every restart and the
    broker's background work (seen: a fault tier's broker restart 3x slower after 50 tests)."""
    try:
        asyncio.run(asyncio.wait_for(delete_topics_containing(broker.bootstrap, names.suffix), 60))
    except Exception as exc:  # a test that failed mid-fault may leave the broker down
        print(f"\ncould not delete the topics of {names.suffix}: {exc!r}")


@dataclass(frozen=True)
class TopicState:
    """A topic as the brokers report it: each partition's replica count, and each config's
    value with whether it is set on the topic itself (not a broker or Kafka default)."""

    replicas: list[int]
    configs: dict[str, tuple[str, bool]]


async def topic_state(bootstrap: str, topic: str) -> TopicState:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    configs: dict[str, tuple[str, bool]] = {}
    for response in responses:
        for _code, _message, _type, _name, entries in response.resources:
            for name, value, _read_only, default_or_source, *_ in entries:
                # DescribeConfigs v0 answers is_default, v1+ the source (1: set on the topic)
                own = (
                    not default_or_source
                    if isinstance(default_or_source, bool)
                    else default_or_source == 1
                )
                configs[name] = (value, own)
    return TopicState([len(p["replicas"]) for p in described["partitions"]], configs)


def unique_suffix() -> str:
    return uuid.uuid4().hex[:10]


@dataclass
class Names:
    """Fresh topic, group and directory names for one test."""

    suffix: str
    data_root: Path

    @property
    def app_id(self) -> str:
        return f"t-{self.suffix}"

    @property
    def input_topic(self) -> str:
        return f"in-{self.suffix}"

    @property
    def output_topic(self) -> str:
        return f"out-{self.suffix}"

    @property
    def dlq_topic(self) -> str:
        return f"dlq-{self.suffix}"

    @property
    def repartition_topic(self) -> str:
        return f"{self.app_id}-{self.input_topic}-repartition"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-seen_ids-changelog"

    @property
    def worker_topics(self) -> list[str]:
        """Every topic the worker creates, in the order it creates them."""
        return [
            self.input_topic,
            self.repartition_topic,
            self.changelog_topic,
            f"{self.app_id}-producer_seqs-changelog",
            self.output_topic,
            self.dlq_topic,
        ]
