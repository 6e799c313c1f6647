"""deploy/kubernetes is valid for Kubernetes (each object checked against the API's own schemas
by kubernetes-validate, strict: no unknown field), and runs what the tests run: each container
the Procfile's command, with only documented settings that validate as at start-up, probes on
the endpoints that exist, and the worker's data dir on its own volume. (No cluster on our build
machines: this is what can be checked.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ingest.settings import IngestSettings
from tests.unit.deploy.test_docker import ROLES, documented, procfile

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
#: The oldest Kubernetes the manifests must load on (policy/v1 PDBs: 1.21+; probes as used here).
KUBERNETES = "1.29.0"
#: Which Procfile process and settings class each workload runs.
WORKLOADS = {"dedupe-worker": "worker", "dedupe-ingest": "web", "dedupe-spark": "spark"}
#: Variables a workload sets that Spark reads, not our settings: its local dir (shuffle and
#: block files), which must be on a volume under a read-only root file system.
RUNTIME_ENV = {"dedupe-spark": {"SPARK_LOCAL_DIRS"}}
#: The image each workload runs (docker/Dockerfile's targets), at the project's version.
IMAGES = {"dedupe-worker": "dedupe", "dedupe-ingest": "dedupe", "dedupe-spark": "dedupe-spark"}


def objects() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def workloads() -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o for o in objects() if o["kind"] in ("StatefulSet", "Deployment")
    }


@pytest.mark.parametrize("version", [KUBERNETES, "1.37.0"])
def test_every_object_is_valid_for_kubernetes(version: str) -> None:
    assert MANIFESTS, "no manifests in deploy/kubernetes"
    for obj in objects():
        kubernetes_validate.validate(obj, version, strict=True)


def test_each_workload_runs_the_procfiles_command_with_documented_settings() -> None:
    config = {o["metadata"]["name"]: o["data"] for o in objects() if o["kind"] == "ConfigMap"}
    roles = {process: cls for process, cls in ROLES.values()}
    commands = procfile()
    found = workloads()
    assert set(found) == set(WORKLOADS)
    for name, process in WORKLOADS.items():
        [container] = found[name]["spec"]["template"]["spec"]["containers"]
        assert " ".join(container["command"]) == commands[process], name
        env = {}
        for var in container.get("env", []):
            if var["name"] in RUNTIME_ENV.get(name, set()):
                continue
            source = var.get("valueFrom", {}).get("configMapKeyRef")
            if source is not None:
                env[var["name"]] = config[source["name"]][source["key"]]
            else:  # a value, or one the cluster gives (the pod's IP, a Secret)
                env[var["name"]] = var.get("value", "from-the-cluster")
        cls = roles[process]
        assert set(env) <= documented(cls), (name, set(env) - documented(cls))
        given = {k: v for k, v in env.items() if v != "from-the-cluster"}
        cls.from_env(given)  # the values validate as at start-up


def test_probes_name_the_endpoints_and_the_worker_keeps_its_data_dir_on_its_volume() -> None:
    found = workloads()
    for name in ("dedupe-worker", "dedupe-ingest"):
        [container] = found[name]["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready", name
        assert container["livenessProbe"]["httpGet"]["path"] == "/health", name
    worker = found["dedupe-worker"]
    [container] = worker["spec"]["template"]["spec"]["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in worker["spec"]["volumeClaimTemplates"]}
    assert env["DEDUPE_DATA_DIR"] == mounts["data"] and "data" in claims
    budgets = [o for o in objects() if o["kind"] == "PodDisruptionBudget"]
    assert any(b["spec"]["selector"] == worker["spec"]["selector"] for b in budgets)


def test_prometheus_scrapes_every_workload_through_its_service_under_the_rules_job_names() -> None:
    """prometheus.yaml's jobs are the ones the alert rules name, and each keeps the endpoints of
    a Service port that leads to a named port of the workload's container (the Spark job's bound
    to every interface: its default, 127.0.0.1, is out of a scraper's reach)."""
    [scrape] = [
        o
        for o in objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "dedupe-prometheus"
    ]
    config = yaml.safe_load(scrape["data"]["prometheus.yml"])
    rules = (ROOT / "deploy" / "prometheus" / "alerts.yml").read_text()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(re.findall(r'job="([\w-]+)"', rules)) == set(WORKLOADS)
    services = {o["metadata"]["name"]: o for o in objects() if o["kind"] == "Service"}
    found = workloads()
    for name, job in jobs.items():
        [keep] = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        service_name, port_name = keep["regex"].split(";")
        service = services[service_name]
        workload = found[name]
        assert service["spec"]["selector"] == workload["spec"]["selector"]["matchLabels"], name
        [port] = [p for p in service["spec"]["ports"] if p["name"] == port_name]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        assert port["targetPort"] in {p["name"] for p in container["ports"]}, name
    [spark] = found["dedupe-spark"]["spec"]["template"]["spec"]["containers"]
    env = {v["name"]: v.get("value") for v in spark["env"]}
    [metrics_port] = [p for p in spark["ports"] if p["name"] == "metrics"]
    assert env["DEDUPE_SPARK_METRICS_HOST"] == "0.0.0.0"
    assert env["DEDUPE_SPARK_METRICS_PORT"] == str(metrics_port["containerPort"])


def container_of(name: str) -> dict[str, Any]:
    [container] = workloads()[name]["spec"]["template"]["spec"]["containers"]
    return container


def values(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the process sees it (ConfigMap keys resolved; what the
    cluster gives, a Secret or the pod's IP, left out)."""
    config = {o["metadata"]["name"]: o["data"] for o in objects() if o["kind"] == "ConfigMap"}
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {}).get("configMapKeyRef")
        if source is not None:
            env[var["name"]] = config[source["name"]][source["key"]]
        elif "value" in var:
            env[var["name"]] = var["value"]
    return env


def test_images_are_pinned_to_the_projects_version() -> None:
    """No `:latest`: a restarted pod would run whatever was pushed last."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, image in IMAGES.items():
        assert container_of(name)["image"] == f"{image}:{version}", name


def test_every_path_a_process_writes_is_a_volume_owned_by_the_images_user() -> None:
    """The root file system is read-only (test_pod_security.py): /tmp, the worker's data dir,
    the lake and Spark's local dir must each be on a volume, writable by uid 10001."""
    for name, workload in workloads().items():
        pod = workload["spec"]["template"]["spec"]
        context = pod["securityContext"]
        owner = (context["runAsUser"], context["runAsGroup"], context["fsGroup"])
        assert owner == (10001, 10001, 10001), name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        container = container_of(name)
        writable = []
        for mount in container["volumeMounts"]:
            assert not mount.get("readOnly"), (name, mount)
            volume = volumes.get(mount["name"], {})
            assert mount["name"] in claims or {"emptyDir", "persistentVolumeClaim"} & set(volume)
            writable.append(Path(mount["mountPath"]))
        [tmp] = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert "emptyDir" in volumes[tmp], name
        env = values(container)
        for var in ("DEDUPE_DATA_DIR", "DEDUPE_LAKE_DIR", "SPARK_LOCAL_DIRS"):
            if var in env:
                path = Path(env[var])
                assert any(path == w or w in path.parents for w in writable), (name, var)
    assert "SPARK_LOCAL_DIRS" in values(container_of("dedupe-spark"))


def test_the_ingest_is_not_killed_while_it_waits_for_kafka() -> None:
    """The ingest listens only once Kafka answers, after up to DEDUPE_INGEST_STARTUP_TIMEOUT;
    liveness alone (10 s x 3) killed it at about 30 s. The startup probe, which holds liveness
    back, allows that wait and the process's start."""
    container = container_of("dedupe-ingest")
    settings = IngestSettings.from_env(values(container))
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    allowed = startup.get("initialDelaySeconds", 0) + startup["periodSeconds"] * startup.get(
        "failureThreshold", 3
    )
    assert allowed >= settings.startup_timeout + 30
    assert "startupProbe" in container_of("dedupe-worker")


def test_the_workers_keep_standbys_and_need_their_token_which_prometheus_sends() -> None:
    workload = workloads()["dedupe-worker"]
    container = container_of("dedupe-worker")
    standbys = int(values(container)["DEDUPE_STANDBY_REPLICAS"])
    assert 1 <= standbys < workload["spec"]["replicas"]
    [token] = [v for v in container["env"] if v["name"] == "DEDUPE_WEB_TOKEN"]
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["key"]
    assert not token["valueFrom"]["secretKeyRef"].get("optional")
    [scrape] = [
        o
        for o in objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "dedupe-prometheus"
    ]
    jobs = {
        j["job_name"]: j for j in yaml.safe_load(scrape["data"]["prometheus.yml"])["scrape_configs"]
    }
    assert jobs["dedupe-worker"]["authorization"]["credentials_file"]


def test_the_ingest_metrics_need_a_token_which_prometheus_sends() -> None:
    container = container_of("dedupe-ingest")
    [token] = [v for v in container["env"] if v["name"] == "DEDUPE_INGEST_METRICS_TOKEN"]
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["key"]
    assert not token["valueFrom"]["secretKeyRef"].get("optional")
    [scrape] = [
        o
        for o in objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "dedupe-prometheus"
    ]
    jobs = {
        j["job_name"]: j for j in yaml.safe_load(scrape["data"]["prometheus.yml"])["scrape_configs"]
    }
    assert jobs["dedupe-ingest"]["authorization"]["credentials_file"].endswith(
        token["valueFrom"]["secretKeyRef"]["key"]
    )


def test_the_worker_and_ingest_pods_spread_over_nodes_under_a_disruption_budget() -> None:
    budgets = [o for o in objects() if o["kind"] == "PodDisruptionBudget"]
    for name in ("dedupe-worker", "dedupe-ingest"):
        workload = workloads()[name]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        spread = workload["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert any(
            c["topologyKey"] == "kubernetes.io/hostname"
            and c["maxSkew"] == 1
            and c["labelSelector"]["matchLabels"].items() <= labels.items()
            for c in spread
        ), name
        assert any(b["spec"]["selector"] == workload["spec"]["selector"] for b in budgets), name
