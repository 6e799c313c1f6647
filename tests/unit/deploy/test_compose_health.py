"""docker/compose.yaml starts each service once what it needs answers: every service another
waits for has a healthcheck, run with a program its image has (the Kafka image's scripts, our
images' python, Prometheus's busybox wget), asking the endpoint and port the process serves.
(No Docker engine on our build machines: this is what can be checked.)"""

from __future__ import annotations

import re
from typing import Any

from ingest.settings import IngestSettings
from tests.unit.deploy.test_docker import ROLES, services

KAFKA_BIN = "/opt/kafka/bin/"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
#: What each of our services' healthcheck asks: its readiness where it has one (the Spark job
#: serves only its metrics), on the port its settings give.
ENDPOINTS = {
    "worker-1": ("/ready", "DEDUPE_WEB_PORT"),
    "worker-2": ("/ready", "DEDUPE_WEB_PORT"),
    "ingest": ("/ready", "PORT"),
    "spark": ("/metrics", "DEDUPE_SPARK_METRICS_PORT"),
}


def seconds(duration: str) -> float:
    """A compose duration such as ``1m30s`` in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def conditions(service: dict[str, Any]) -> dict[str, str]:
    depends = service.get("depends_on", {})
    assert isinstance(depends, dict), "depends_on as a list waits for nothing but the start"
    return {name: entry["condition"] for name, entry in depends.items()}


def test_each_service_waits_for_what_it_needs_to_be_healthy() -> None:
    found = services()
    for name, service in found.items():
        for needed, condition in conditions(service).items():
            assert condition in ("service_healthy", "service_started"), (name, needed)
            if condition == "service_healthy":
                assert "healthcheck" in found[needed], (name, needed)
    for name in BROKERS:
        assert conditions(found[name]) == {"controller": "service_healthy"}, name
    for name in ROLES:
        waits = conditions(found[name])
        assert all(waits.get(b) == "service_healthy" for b in BROKERS), name
    # The Spark job reads the clean topic, which a ready worker has created.
    assert "service_healthy" in {
        conditions(found["spark"]).get(w) for w in ("worker-1", "worker-2")
    }


def test_the_kafka_nodes_check_themselves_with_the_images_scripts_on_their_listener() -> None:
    found = services()
    for name in ("controller", *BROKERS):
        test = found[name]["healthcheck"]["test"]
        assert test[0] == "CMD" and test[1].startswith(KAFKA_BIN), name
        port = found[name]["environment"]["KAFKA_LISTENERS"].rsplit(":", 1)[1]
        assert f"localhost:{port}" in test, name
    assert "--bootstrap-controller" in found["controller"]["healthcheck"]["test"]


def test_our_services_get_their_ready_endpoint_with_python_on_their_own_port() -> None:
    found = services()
    for name, (path, port_variable) in ENDPOINTS.items():
        test = found[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"], name
        port = found[name]["environment"][port_variable]
        # urlopen raises on a 503 (not ready) as on a refused connection: exit status 1.
        assert f"urlopen('http://127.0.0.1:{port}{path}'" in test[3], name
        compile(test[3], name, "exec")
    prometheus = found["prometheus"]["healthcheck"]["test"]
    assert prometheus[:2] == ["CMD", "wget"] and prometheus[-1].endswith(":9090/-/ready")


def test_the_ingest_is_given_its_wait_for_kafka_before_it_counts_as_failing() -> None:
    """The ingest listens only after Kafka and the input topic answer, within
    DEDUPE_INGEST_STARTUP_TIMEOUT (60 s by default)."""
    found = services()
    env = {k: str(v) for k, v in found["ingest"]["environment"].items()}
    timeout = IngestSettings.from_env(env).startup_timeout
    assert seconds(found["ingest"]["healthcheck"]["start_period"]) > timeout
