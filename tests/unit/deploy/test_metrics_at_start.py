"""What each component's ``GET /metrics`` holds before anything happened: every counter an alert
or a dashboard panel reads, for each label value the code knows, at 0 (``increase()`` misses
the first event of a series that appears at 1), the ingest's Kafka errors by kind whatever
the error's class; the process metrics and
``dedupe_build_info{version}`` on the worker, the ingest service and the Spark job; and the
worker's restore gauge at 0 once a restore ended, a revoked one included."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import re
import sys
from pathlib import Path

import pytest
from aiokafka import errors as kafka_errors
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from app.worker import metrics as worker_metrics
from envsettings import process_metrics
from ingest import metrics as ingest_metrics
from recovery.restore import Progress, Restorer
from spark import metrics as spark_metrics
from tests.unit.recovery.test_restore import TP, RecordingStore, ScriptedReader, changelog

REGISTRIES = {
    "worker": worker_metrics.REGISTRY,
    "ingest": ingest_metrics.REGISTRY,
    "spark": spark_metrics.REGISTRY,
}
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_the_worker_exports_every_partitions_commit_failures_at_0() -> None:
    worker_metrics.export_commit_failures(3)
    for partition in ("0", "1", "2"):
        for reason in ("unknown_outcome", "error"):
            labels = {"partition": partition, "reason": reason}
            value = worker_metrics.REGISTRY.get_sample_value("dedupe_commit_failures_total", labels)
            assert value is not None, labels


def test_the_worker_knows_every_reason_its_commit_counts_failures_under() -> None:
    """The reasons ``app/eos/commit.py`` counts (its ``failed(task, ...)`` calls)."""
    source = (Path(worker_metrics.__file__).parents[1] / "eos" / "commit.py").read_text()
    counted = set(re.findall(r'failed\(task, "(\w+)"\)', source))
    assert counted and counted <= set(worker_metrics.COMMIT_FAILURE_REASONS)


def test_the_ingest_service_exports_the_answers_and_errors_it_knows_at_0() -> None:
    get = ingest_metrics.REGISTRY.get_sample_value
    for endpoint in ("batch", "track", "identify", "page", "screen", "group", "alias"):
        for status in ("200", "500", "503"):
            labels = {"endpoint": endpoint, "status": status}
            assert get("dedupe_ingest_requests_total", labels) is not None, labels
        assert get("dedupe_ingest_events_total", {"endpoint": endpoint}) is not None
    for status in ("200", "503"):
        labels = {"endpoint": "ready", "status": status}
        assert get("dedupe_ingest_requests_total", labels) is not None
    for error in ("timeout", "retriable", "authorization", "record_too_large", "other"):
        assert get("dedupe_ingest_kafka_errors_total", {"error": error}) is not None


def kafka_error_classes() -> list[type[BaseException]]:
    """Every error class of the Kafka client, a class it does not have yet, and asyncio's
    timeout and an error that is not Kafka's (both reach the ingest's counter too)."""

    class ErrorOfALaterRelease(kafka_errors.BrokerResponseError):
        errno = 10_000

    def below(cls: type[BaseException]) -> list[type[BaseException]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    return [
        kafka_errors.KafkaError,
        *below(kafka_errors.KafkaError),
        ErrorOfALaterRelease,
        TimeoutError,
        ValueError,
    ]


def kafka_error_counts() -> dict[str, float]:
    return {
        s.labels["error"]: s.value
        for family in ingest_metrics.REGISTRY.collect()
        if family.name == "dedupe_ingest_kafka_errors"
        for s in family.samples
        if s.name == "dedupe_ingest_kafka_errors_total"
    }


def test_a_send_error_of_any_class_counts_on_a_series_exported_at_0() -> None:
    """The sink raises a failed send's own error, of whichever class the client gives it: the
    first error of a class never seen before counts on a series that was there at start-up,
    so ``increase()`` sees it."""
    classes = kafka_error_classes()
    assert len(classes) > 50
    for kind in classes:
        before = kafka_error_counts()
        with pytest.raises(kind), ingest_metrics.Sending("batch", 1):
            raise kind()
        after = kafka_error_counts()
        assert after.keys() == before.keys(), (kind, after.keys() - before.keys())
        assert sum(after.values()) == sum(before.values()) + 1, kind


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        (kafka_errors.KafkaTimeoutError, "timeout"),
        (TimeoutError, "timeout"),
        (kafka_errors.RequestTimedOutError, "timeout"),
        (kafka_errors.KafkaConnectionError, "retriable"),
        (kafka_errors.NotEnoughReplicasError, "retriable"),
        (kafka_errors.NotEnoughReplicasAfterAppendError, "retriable"),
        (kafka_errors.NotLeaderForPartitionError, "retriable"),
        (kafka_errors.TopicAuthorizationFailedError, "authorization"),
        (kafka_errors.ClusterAuthorizationFailedError, "authorization"),
        (kafka_errors.TransactionalIdAuthorizationFailed, "authorization"),
        (kafka_errors.SaslAuthenticationFailed, "authorization"),
        (kafka_errors.RecordTooLargeError, "record_too_large"),
        (kafka_errors.MessageSizeTooLargeError, "record_too_large"),
        (kafka_errors.RecordListTooLargeError, "record_too_large"),
        (kafka_errors.KafkaError, "other"),
        (kafka_errors.OutOfOrderSequenceNumber, "other"),
        (kafka_errors.UnknownError, "other"),
        (ValueError, "other"),
    ],
)
def test_each_kafka_error_counts_under_its_kind(kind: type[BaseException], error: str) -> None:
    assert ingest_metrics.kafka_error_kind(kind) == error


def test_every_refusal_of_the_services_kafka_user_counts_as_authorization() -> None:
    """Kafka refusing the service's user, whichever class says so."""
    denied = [
        c
        for c in kafka_error_classes()
        if "AuthorizationFailed" in c.__name__ or "AuthenticationFailed" in c.__name__
    ]
    assert len(denied) >= 6
    assert {ingest_metrics.kafka_error_kind(c) for c in denied} == {"authorization"}


def test_the_spark_job_exports_each_querys_counters_at_0_once_started() -> None:
    get = spark_metrics.REGISTRY.get_sample_value
    assert get("dedupe_lake_batches_total", {"query": "not-started"}) is None
    spark_metrics.ProgressMetrics().expect(["not-started"])
    assert get("dedupe_lake_batches_total", {"query": "not-started"}) == 0
    assert get("dedupe_lake_rows_total", {"query": "not-started"}) == 0


@pytest.mark.parametrize("component", sorted(REGISTRIES))
def test_each_component_says_its_version(component: str) -> None:
    version = importlib.metadata.version("dedupe")
    registry = REGISTRIES[component]
    assert registry.get_sample_value("dedupe_build_info", {"version": version}) == 1


@linux_only
@pytest.mark.parametrize("component", sorted(REGISTRIES))
def test_each_component_exports_its_process_memory_and_cpu(component: str) -> None:
    registry = REGISTRIES[component]
    assert (registry.get_sample_value("process_resident_memory_bytes") or 0) > 0
    assert registry.get_sample_value("process_cpu_seconds_total") is not None
    assert registry.get_sample_value("process_start_time_seconds") is not None


def test_a_tree_that_is_not_installed_says_its_version_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(process_metrics, "version", missing)
    registry = CollectorRegistry()
    process_metrics.register(registry)
    assert registry.get_sample_value("dedupe_build_info", {"version": "unknown"}) == 1


@linux_only
def test_the_spark_jobs_jvm_is_measured_once_its_pid_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    get = spark_metrics.REGISTRY.get_sample_value
    monkeypatch.setattr(spark_metrics, "_jvm_pid", [])
    assert get("dedupe_spark_jvm_process_resident_memory_bytes") is None
    spark_metrics.watch_jvm(os.getpid())  # this process stands in for the JVM
    assert (get("dedupe_spark_jvm_process_resident_memory_bytes") or 0) > 0


def remaining(tp: TopicPartition) -> float | None:
    return worker_metrics.REGISTRY.get_sample_value(
        "dedupe_restore_remaining_offsets", {"changelog": tp.topic, "partition": str(tp.partition)}
    )


def test_a_restore_revoked_midway_leaves_its_gauge_at_0() -> None:
    """A partition revoked during its restore: the gauge said offsets were left, and kept
    saying it, so DedupeRestoreLong fired for a restore that no longer ran."""
    records = changelog(12)
    end = records[-1].offset + 1
    store = RecordingStore()
    tp = TP
    seen: list[float | None] = []

    def progress(done: Progress, written: int) -> None:
        worker_metrics.restore_progress(done, written)
        seen.append(remaining(tp))

    restorer = Restorer(ScriptedReader(records, end), progress)
    assert not asyncio.run(restorer.restore(store, tp, end, lambda: len(store.writes) < 2))
    assert seen[0] is not None and seen[0] > 0  # while it ran
    assert remaining(tp) == 0


def test_a_restore_done_leaves_its_gauge_at_0() -> None:
    records = changelog(6)
    end = records[-1].offset + 1
    tp = TP
    restorer = Restorer(ScriptedReader(records, end), worker_metrics.restore_progress)
    assert asyncio.run(restorer.restore(RecordingStore(), tp, end, lambda: True))
    assert remaining(tp) == 0
