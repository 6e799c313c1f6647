"""docker/compose.yaml runs what the tests run: each service the Procfile's command, with only
documented settings. (No Docker engine on our build machines: this is what can be checked.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings
from envsettings import EnvSettings
from ingest.settings import IngestSettings
from scripts.kafka_cluster_nodes import BROKER_PROPS, CONTROLLER_KEYS
from spark.settings import SparkSettings
from tests.image.dockerfile import UnknownStep, context_ignored

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "docker" / "compose.yaml"

#: Which Procfile process and settings class each compose service runs.
ROLES: dict[str, tuple[str, type[EnvSettings]]] = {
    "worker-1": ("worker", Settings),
    "worker-2": ("worker", Settings),
    "ingest": ("web", IngestSettings),
    "spark": ("spark", SparkSettings),
}


#: The cluster tier's broker settings that exactly-once depends on (the rest only fit the
#: test cluster onto two cores).
TESTED = (
    "default.replication.factor",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "auto.create.topics.enable",
)


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(
        (name.strip(), command.strip())
        for name, _, command in (line.partition(":") for line in lines)
        if command and not name.startswith("#")
    )


def services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = compose["services"]
    return found


def documented(cls: type[EnvSettings]) -> set[str]:
    return {doc.env for _, _, doc in cls.documented()}


def test_each_service_runs_the_procfiles_command() -> None:
    commands = procfile()
    found = services()
    for service, (process, _) in ROLES.items():
        assert found[service]["command"] == commands[process], service
    assert set(commands.values()) <= {found[s]["command"] for s in ROLES}


def test_each_service_sets_only_documented_settings_that_validate() -> None:
    for service, (_, cls) in ROLES.items():
        env = {k: str(v) for k, v in services()[service]["environment"].items()}
        assert set(env) <= documented(cls), (service, set(env) - documented(cls))
        cls.from_env(env)  # the values validate as at start-up


def test_the_two_workers_differ_only_in_their_data_dir_and_address() -> None:
    one, two = (services()[w]["environment"] for w in ("worker-1", "worker-2"))
    assert {k for k in one if one[k] != two.get(k)} == {
        "DEDUPE_DATA_DIR",
        "DEDUPE_WEB_ADVERTISED_HOST",
    }
    for name in ("worker-1", "worker-2"):  # the name the other reaches it at
        assert services()[name]["environment"]["DEDUPE_WEB_ADVERTISED_HOST"] == name
    assert set(one) == set(two)


def test_the_workers_agree_with_ingest_and_spark_on_the_topics() -> None:
    found = services()
    worker = Settings.from_env({k: str(v) for k, v in found["worker-1"]["environment"].items()})
    ingest = IngestSettings.from_env({k: str(v) for k, v in found["ingest"]["environment"].items()})
    spark = SparkSettings.from_env({k: str(v) for k, v in found["spark"]["environment"].items()})
    assert ingest.input_topic == worker.input_topic
    assert spark.topic == worker.output_topic
    assert worker.bootstrap_servers == ingest.bootstrap_servers == spark.bootstrap_servers


def test_prometheus_scrapes_every_component_under_the_rules_job_names() -> None:
    config = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    port = services()["worker-1"]["environment"]["DEDUPE_WEB_PORT"]
    ingest_port = services()["ingest"]["environment"]["PORT"]
    spark_env = services()["spark"]["environment"]
    assert jobs["dedupe-worker"]["metrics_path"] == "/metrics"
    assert jobs["dedupe-worker"]["static_configs"][0]["targets"] == [
        f"worker-1:{port}",
        f"worker-2:{port}",
    ]
    assert jobs["dedupe-ingest"]["static_configs"][0]["targets"] == [f"ingest:{ingest_port}"]
    # The lake job serves its metrics on 127.0.0.1 unless told otherwise: another container
    # could not reach them.
    spark = SparkSettings.from_env({k: str(v) for k, v in spark_env.items()})
    assert spark.metrics_host == "0.0.0.0" and spark.metrics_port
    assert jobs["dedupe-spark"]["static_configs"][0]["targets"] == [f"spark:{spark.metrics_port}"]
    rules = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    rule_jobs = set(re.findall(r'job="([\w-]+)"', rules))
    assert set(jobs) == rule_jobs
    assert set(services()["prometheus"]["depends_on"]) == set(ROLES)
    mounted = services()["prometheus"]["volumes"]
    assert f"../deploy/prometheus/alerts.yml:{config['rule_files'][0]}:ro" in mounted


def test_the_images_default_command_is_the_procfiles_worker() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    worker = procfile()["worker"].split()
    spark = procfile()["spark"].split()
    assert f"CMD {worker!r}".replace("'", '"') in dockerfile
    assert f"CMD {spark!r}".replace("'", '"') in dockerfile
    for package in ("app", "tables", "envsettings", "ingest", "spark"):
        assert f"COPY {package} ./{package}" in dockerfile, package


def copied_packages(dockerfile: str) -> set[str]:
    """The repository's packages the image's COPY lines bring in."""
    found = re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.M)
    return {name for name in found if (ROOT / name / "__init__.py").exists()}


def imported_packages(package: str) -> set[str]:
    """The repository's top-level packages that the modules of ``package`` import."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return {name for name in names if (ROOT / name / "__init__.py").exists()}


def test_the_image_copies_every_package_its_packages_import() -> None:
    """The image once copied neither adapters/ nor recovery/, which app/worker/factory.py and
    tables/store.py import: the worker it built could not start."""
    copied = copied_packages((ROOT / "docker" / "Dockerfile").read_text())
    for package in sorted(copied):
        missing = imported_packages(package) - copied
        assert not missing, f"{package}/ imports {sorted(missing)}, which the image lacks"


def test_the_build_context_leaves_out_local_state_and_keeps_what_the_image_copies() -> None:
    """.dockerignore keeps virtualenvs, caches and build output (native/target's compiled
    crates) out of the context; nothing a COPY line takes may be left out with them."""
    for local in (
        ".venv/bin/python",
        "native/target/release/libx.so",
        "app/__pycache__/a.pyc",
        ".cache/kafka/x.jar",
        "data/tables/x",
        "libs/x.egg-info/PKG-INFO",
        ".git/HEAD",
    ):
        assert context_ignored(local), local
    for source in ("app/eos/manager.py", "native/src/lib.rs", "native/Cargo.lock", "README.md"):
        assert not context_ignored(source), source
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from)(\S+) ", dockerfile, re.M)
    assert len(copied) > 5
    for source in copied:
        assert not context_ignored(source.strip("/")), source
    with pytest.raises(UnknownStep):
        context_ignored("app", "!app\n")


def test_the_kafka_nodes_are_the_cluster_tiers_shape() -> None:
    """A dedicated controller and three brokers with the settings the cluster tier tests
    (scripts/kafka_cluster_nodes.py), and no feature overrides: Kafka's defaults."""
    found = services()
    controller = found["controller"]["environment"]
    assert controller["KAFKA_PROCESS_ROLES"] == "controller"
    brokers = [found[f"kafka-{n}"]["environment"] for n in (1, 2, 3)]
    assert [b["KAFKA_NODE_ID"] for b in brokers] == [1, 2, 3]
    for env in brokers:
        assert env["KAFKA_PROCESS_ROLES"] == "broker"
        for key, value in BROKER_PROPS.items():
            name = "KAFKA_" + key.upper().replace(".", "_")
            if key in TESTED:
                assert str(env[name]).lower() == value, name
    for key in CONTROLLER_KEYS:
        name = "KAFKA_" + key.upper().replace(".", "_")
        assert str(controller[name]).lower() == BROKER_PROPS[key], name
    assert not any("FEATURE" in k for s in found.values() for k in s.get("environment", {}))
    bootstrap = ",".join(f"kafka-{n}:9092" for n in (1, 2, 3))
    for name in ROLES:
        assert found[name]["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == bootstrap, name
