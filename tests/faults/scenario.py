"""Building blocks of the fault tests: a scaled stream fed in the background, and the full
verification of a run (``scripts.verify.verify_pipeline``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

from app.settings import Settings
from scripts.streams import Stream, build_stream, produce
from scripts.verify import FullReport, verify_pipeline
from tests.faults.conftest import SCALE, Reliability
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained


def scaled_stream(unique: int, seed: int, duplicates: float = 0.1) -> Stream:
    return build_stream(unique * SCALE, duplicates, seed=seed)


class Feeder:
    """Produces a stream from a background thread while the test injects faults."""

    def __init__(
        self,
        broker: Broker,
        names: Names,
        stream: Stream,
        rate: float | None = None,
        *,
        seconds: float | None = None,
        part: tuple[int, int] | None = None,
        client: Mapping[str, Any] | None = None,
    ) -> None:
        """``rate``: records per second (a steady feed); ``seconds``: a steady feed spread over
        about that long (whatever ``DEDUPE_FAULT_SCALE`` makes of the stream); default: as fast
        as can be. A fault meant to land while the stream flows needs a steady feed: the worker
        processes a test's stream at full speed in a second or two. ``part=(i, n)``: only the
        i-th of n consecutive parts of the stream (feed them in order, one after the other).
        ``client``: aiokafka's security arguments (tests/security)."""
        records = stream.records
        if part is not None:
            i, n = part
            size = -(-len(records) // n)
            records = records[i * size : (i + 1) * size]
        if seconds is not None:
            rate = len(records) / seconds
        self.sent: list[int] = []
        self._hurry = threading.Event()
        self.thread = threading.Thread(
            # A client that waits out broker restarts (a restart on a loaded machine took
            # longer than aiokafka's default 40 s, and the feed failed with
            # LeaderNotAvailableError instead of going on after it).
            target=lambda: self.sent.append(
                asyncio.run(
                    produce(
                        broker.bootstrap,
                        names.input_topic,
                        records,
                        rate=rate,
                        patience=300.0,
                        client=client,
                        hurry=self._hurry.is_set,
                    )
                )
            ),
            daemon=True,
        )
        self.thread.start()

    def flowing(self) -> bool:
        """True while records are still being produced."""
        return self.thread.is_alive()

    def assert_flowing(self) -> None:
        """Fail the test when the feed already ended: the fault about to land would meet an
        idle worker and prove less than it claims."""
        assert self.flowing(), "the stream had ended: the fault met an idle worker"

    def finish(self, timeout: float = 600) -> int:
        """The rest of the stream as fast as can be, then :meth:`join`: for a feed spread over
        its ``seconds`` only to outlast faults that may take that long, once the last one met
        it flowing."""
        self._hurry.set()
        return self.join(timeout)

    def join(self, timeout: float = 600) -> int:
        self.thread.join(timeout)
        assert self.sent, "the producer did not finish"
        return self.sent[0]


def settings_of(
    broker: Broker, names: Names, partitions: int, extra: Mapping[str, str] | None = None
) -> Settings:
    """The worker settings of a test's pipeline (``extra``: more variables, e.g. security)."""
    return Settings.from_env(
        {
            **(extra or {}),
            "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
            "DEDUPE_APP_ID": names.app_id,
            "DEDUPE_INPUT_TOPIC": names.input_topic,
            "DEDUPE_OUTPUT_TOPIC": names.output_topic,
            "DEDUPE_DLQ_TOPIC": names.dlq_topic,
            "DEDUPE_PARTITIONS": str(partitions),
        }
    )


def started(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    *,
    index: int = 0,
    extra_env: Mapping[str, str] | None = None,
) -> Worker:
    """A worker (``index``, settings ``extra_env``) started, ready, and in ``workers``."""
    worker = Worker(broker, names, index=index, extra_env=dict(extra_env or {}))
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    return worker


def drain_and_verify(
    broker: Broker, names: Names, workers: list[Worker], partitions: int = 4, timeout: float = 900
) -> tuple[FullReport, float]:
    """Wait until everything was committed, then run every check; returns (report, seconds)."""
    started = time.monotonic()
    wait_drained(broker, names, timeout=timeout, workers=workers)
    waited = time.monotonic() - started
    report = asyncio.run(verify_pipeline(settings_of(broker, names, partitions), first_copy=True))
    return report, waited


def record(
    reliability: Reliability,
    fault: str,
    events: int,
    injected: int,
    report: FullReport,
    waited: float,
    txn_version: str = "",
) -> None:
    """Add a run's figures to the reliability report, print them, and fail the test unless
    the run was exactly once. ``txn_version``: the row's, where it is not the tier's."""
    reliability.record(
        fault,
        events=events,
        injected=injected,
        duplicates=report.clean.duplicates,
        missing=report.clean.missing,
        recover_s=waited,
        txn_version=txn_version,
    )
    print(f"\n{fault}: " + " | ".join(report.lines()))
    assert report.ok, "\n".join(report.lines())
