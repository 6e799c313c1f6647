"""``create_app(settings)``: the Faust app with its topics, table, agent and exactly-once plumbing.

The one place where the parts are wired together; ``app/worker/main.py`` calls it with the settings
from the environment, tests call it with their own.
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient
from yarl import URL

import recovery
from adapters import fetched_records
from app.admin.snapshots import SnapshotSchedule
from app.admin.topics import ensure_topics
from app.eos import BatchHandler, TaskTransactionManager, Transport, txn_protocol
from app.eos.consumer import FaustAppHooks
from app.eos.producer import ProducerSupplier, TransactionalProducers
from app.faults.points import NO_FAULTS, FaultPoints
from app.settings import Settings
from app.web.views import WorkerState, is_ready, register_views
from app.worker import metrics
from app.worker.agents import batch_handler, register_agents
from app.worker.dedup import Deduplicator
from app.worker.metrics import RebalanceSensor, restore_progress
from app.worker.stats import partition_stats
from app.worker.window_watch import WindowWatch
from envsettings import parse_count
from recovery import TransactionalTableManager
from recovery.reader import ChangelogReader
from recovery.restore import FETCH_BYTES
from recovery.retry import retrying
from tables.producers import ProducerSeqs, declare_producer_seqs
from tables.producers import changelog_topic_name as producers_changelog_name
from tables.seen_ids import SeenIds
from tables.seen_ids.table import changelog_topic_name, declare_seen_ids, rocks_tuning
from tables.transactional import TransactionalTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppParts:
    """What the app serves, built after it (the tables are declared on the app)."""

    #: The state that follows the transactions (registered with them at start-up).
    seen_ids_table: TransactionalTable
    producer_seqs_table: TransactionalTable
    dedup: Deduplicator
    #: Where the consumer hands source records (see app.eos.Consumer).
    batch_handler: BatchHandler


class DedupeApp(FaustAppHooks):
    """A Faust app whose transactions are run by :class:`app.eos.TaskTransactionManager`.

    Faust creates the consumer, the transaction manager and the recovery itself, from the app:
    they read the settings, the client supplier and the fault points here. The tables are
    declared on the app, so the parts that hold them are handed in once, by :meth:`serve`,
    before the worker starts."""

    seen_ids_table: TransactionalTable
    producer_seqs_table: TransactionalTable
    dedup: Deduplicator
    batch_handler: BatchHandler
    #: How fetched source records are decoded: "native" or "aiokafka" (``use_native_records``).
    record_decoding: str = "aiokafka"

    def __init__(
        self,
        app_id: str,
        *,
        settings: Settings,
        points: FaultPoints,
        producers: ProducerSupplier,
        **options: Any,
    ) -> None:
        self.dedupe_settings = settings
        #: The transaction manager's hooks (``app/eos/hooks.py``; :func:`fault_seams`: where the
        #: fault tests act on the consumer, the rebalances and the stores); Faust makes the
        #: manager from the app, which reads them here.
        self.eos_hooks = points
        #: Makes the client supplier every task's producer comes from (:func:`fault_seams`).
        self.producer_supplier = producers
        self._served = False
        super().__init__(app_id, **options)

    def serve(self, parts: AppParts) -> None:
        """The tables, the deduplicator and the batch handler this app runs (once)."""
        if self._served:
            raise RuntimeError("the app's parts are handed in once, by the factory")
        self._served = True
        self.seen_ids_table = parts.seen_ids_table
        self.producer_seqs_table = parts.producer_seqs_table
        self.dedup = parts.dedup
        self.batch_handler = parts.batch_handler

    #: Faust builds its transport from this: our consumer and transaction manager.
    transport_type = Transport

    async def consumer_idle(self) -> None:
        """Faust waits for the agents to finish their current records, on a rebalance and on a
        stop; on a stop it closes the tables right after. Commit now, while the stores are
        open, so the last transaction's writes reach RocksDB with its changelog offset (on a
        rebalance this is the commit ``on_partitions_revoked`` would make a moment later)."""
        await self.transactions.commit_all()

    def on_init_dependencies(self) -> Any:
        """Faust's services, with :class:`app.worker.metrics.RebalanceSensor` for its Monitor
        sensor.

        Faust always adds a Monitor that records per-event and per-table-access statistics
        for its own /stats pages, which this worker disables (``web_stats_enabled=False``; our
        metrics are in ``app.worker.metrics``). Its hooks ran several times per record on the hot
        path for figures nobody reads. Without any sensor Faust warns "Missing sensor state"
        at every rebalance, so the rebalance timer takes its place."""
        services = super().on_init_dependencies()
        if self.monitor in set(self.sensors):
            self.sensors.remove(self.monitor)
        if not any(isinstance(s, RebalanceSensor) for s in self.sensors):
            self.sensors.add(RebalanceSensor())
        return services

    async def on_first_start(self) -> None:
        await super().on_first_start()
        s = self.dedupe_settings
        if not self.in_transaction:
            raise RuntimeError("the dedup worker must run as a Faust worker with exactly_once")
        replication = await retrying(
            "creating and checking the topics",
            lambda: ensure_topics(
                s, changelog_topic_name(s), more_changelogs=[producers_changelog_name(s)]
            ),
        )
        # Topics Faust declares itself (the assignor's leader topic) are created after this,
        # by its child services: with the replication the cluster's size gave ours.
        self.conf.topic_replication_factor = replication
        # The transaction protocol is chosen once, before any task's producer starts.
        protocol = await retrying(
            "asking the cluster's transaction version", lambda: txn_protocol.detect(s)
        )
        self.transactions.producers.use_protocol(protocol)
        # The state that follows the transactions: the table's store (its staged writes are
        # the changelog records, pulled at each commit; it keeps the source offsets too) and
        # the age-out's live figures.
        table, tm = self.seen_ids_table, self.transactions
        tm.register_store(table.store, table.changelog_name())
        tm.keep_source_offsets(table.store, table.changelog_name())
        tm.register_store(self.dedup.seen_ids)
        producers = self.producer_seqs_table
        tm.register_store(producers.store, producers.changelog_name())
        assert self.dedup.producers is not None
        tm.register_store(self.dedup.producers)
        log.info(decoding_line(self.record_decoding, s.native_records, self.dedup.scans_ids))
        settle_heap()

    @property
    def transactions(self) -> TaskTransactionManager:
        tm: TaskTransactionManager = self.consumer.transactions
        return tm


@dataclass(frozen=True)
class Pipeline:
    """The app and the parts other modules (web views, tests) need a handle on."""

    app: DedupeApp
    settings: Settings
    seen_ids: TransactionalTable
    dedup: Deduplicator


#: How long (ms) the broker may hold a changelog fetch for records it does not have yet.
RESTORE_FETCH_WAIT_MS = 20


def changelog_client(settings: Settings) -> AIOKafkaClient:
    """The changelog reader's client (``recovery/reader.py`` sends its fetches through it)."""
    return AIOKafkaClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.app_id}-restorer",
        **settings.kafka_client_kwargs(),
    )


def changelog_reader(settings: Settings) -> ChangelogReader:
    """The changelog reader of the restore and the standbys: committed records only, large
    fetches."""
    return ChangelogReader(
        partial(changelog_client, settings),
        fetch_bytes=FETCH_BYTES,
        # A fetch at a partition's end waits this long for records the broker does not have,
        # and the next partition's first fetch waits for it: at aiokafka's 500 ms every
        # restore after the first began half a second late (standby takeovers included).
        max_wait_ms=RESTORE_FETCH_WAIT_MS,
    )


def fault_seams() -> tuple[FaultPoints, ProducerSupplier]:
    """Production's no-op fault points and its client supplier (the plain producers), or the
    fault tests' when ``DEDUPE_FAULT_INJECTION`` is set (docs/testing.md): their points and
    the supplier of producers that act at the send and commit points. The test modules are
    imported only then."""
    if not os.environ.get("DEDUPE_FAULT_INJECTION"):
        return NO_FAULTS, TransactionalProducers
    from app.faults.injection import from_environment

    injected = from_environment()
    if injected is None:
        return NO_FAULTS, TransactionalProducers
    return injected, injected.producer_supplier


#: Container objects allocated, net, before the collector looks at the young ones (CPython's
#: default is 700). Records make a few short-lived containers each (header tuples, batch lists)
#: that reference counting frees; at 700 the collector ran every few hundred records for
#: nothing, and every tenth run of it over the older generation too.
GC_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Once the worker is built: every object made so far (modules, Faust's services, the
    settings) lives as long as the process, so it leaves the collector's reach (``gc.freeze``,
    as CPython advises long-lived servers) and a full collection walks only what came since; and
    young collections run after :data:`GC_YOUNG_THRESHOLD` allocations instead of 700.
    bench/results.md's CPU per event includes the collector's share."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def use_native_records(settings: Settings) -> str:
    """Decode the source partitions' fetches natively when DEDUPE_NATIVE_RECORDS allows it and
    the extension is installed (``adapters/fetched_records.py``); returns how they are decoded:
    ``"native"`` or ``"aiokafka"``. Settings validation already refused ``on`` without it."""
    native = fetched_records.for_setting(settings.native_records)
    if native is None:
        fetched_records.uninstall()
        return "aiokafka"
    fetched_records.install(native, [settings.input_topic, settings.repartition_topic])
    return "native"


def decoding_line(decoding: str, setting: str, scans_ids: bool) -> str:
    """The start-up log line that says how fetched records are decoded, and why; natively,
    whether their messageIds are found by the native scan (``Deduplicator.scans_ids``)."""
    if decoding == "native":
        ids = (
            "messageIds found by its scan"
            if scans_ids
            else "every value parsed (its messageId scan needs DEDUPE_TIME_SOURCE=kafka, no "
            "DEDUPE_VERIFY_CONTENT and a default strategy by id)"
        )
        native = "fetched records of the source topics decoded natively (dedupe_native)"
        # The producers' batches follow the same setting (app/eos/producer.py).
        built = "batches of codec none or zstd built natively, others by aiokafka's builder"
        return f"dedupe: {native}, {ids}; {built}"
    why = (
        "DEDUPE_NATIVE_RECORDS=off"
        if setting == "off"
        else "the native module (dedupe_native) is not installed; make install builds it"
    )
    return (
        f"dedupe: fetched records decoded by aiokafka's loop, batches built by its builder ({why})"
    )


def create_app(settings: Settings) -> Pipeline:
    """Build the dedup worker for ``settings``."""
    brokers = [URL(f"kafka://{b.strip()}") for b in settings.bootstrap_servers.split(",")]
    points, producers = fault_seams()
    app = DedupeApp(
        settings.app_id,
        settings=settings,
        points=points,
        producers=producers,
        broker=brokers,
        broker_credentials=settings.faust_credentials(),
        store="rocksdb://",
        datadir=str(settings.data_dir),
        autodiscover=False,
        # Faust then starts our transaction manager (app/eos/), which does the commits.
        processing_guarantee="exactly_once",
        consumer_auto_offset_reset="earliest",
        topic_partitions=settings.partitions,
        # "auto" depends on the broker count: on_first_start sets it once that is known.
        topic_replication_factor=parse_count(settings.replication_factor) or 1,
        table_standby_replicas=settings.standby_replicas,
        # Faust's own commit timer is a no-op under our transaction manager; keep it quiet.
        broker_commit_interval=max(settings.commit_interval, 1.0),
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=max(settings.session_timeout / 5, 0.5),
        producer_max_request_size=settings.dlq_max_message_bytes,
        consumer_max_fetch_size=max(settings.dlq_max_message_bytes, 4 * 1024 * 1024),
        web_enabled=True,
        web_host=settings.web_host,
        # Other workers forward /messages/{id} requests here (Faust's router).
        canonical_url=settings.web_url,
        web_bind=settings.web_host,
        web_port=settings.web_port,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_router_enabled=False,
        web_stats_enabled=False,
        web_metrics_enabled=False,
        logging_config=None,
        # A recovery whose every changelog partition the changelog reader reads
        # (recovery/faust_adapter.py).
        TableManager=TransactionalTableManager,
    )
    reader = changelog_reader(settings)
    recovery.install(
        app,
        reader,
        restore_source=points.restore_source(reader),
        on_progress=points.restore_progress(restore_progress),
    )
    seen_ids = declare_seen_ids(app, settings)
    producer_seqs = declare_producer_seqs(app, settings, rocks_tuning(settings))
    source = app.topic(
        settings.input_topic,
        settings.repartition_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
    )
    app.record_decoding = decoding = use_native_records(settings)
    native = fetched_records.load() if decoding == "native" else None
    dedup = Deduplicator(
        settings,
        SeenIds(seen_ids, settings),
        ProducerSeqs(producer_seqs, settings),
        message_ids=None if native is None else native.message_ids,
    )
    register_agents(app, source)
    app.serve(AppParts(seen_ids, producer_seqs, dedup, batch_handler(app, dedup)))
    watch = WindowWatch(dedup.seen_ids)
    figures = partial(partition_stats, app, dedup, watch, decoding)
    metrics.register(figures, settings)
    seqs = dedup.producers
    register_views(
        app,
        settings,
        WorkerState(
            stats=figures,
            exposition=metrics.exposition,
            seen_entry=dedup.seen_ids.committed_entry,
            producer=seqs.committed if seqs is not None else None,
        ),
    )

    async def watch_windows() -> None:
        await watch.tick(lambda: is_ready(app), lambda: app.consumer.transactions.tasks)

    app.timer(1.0)(watch_windows)

    if settings.snapshot_dir:
        schedule = SnapshotSchedule(Path(settings.snapshot_dir), settings.snapshot_keep)
        app.timer(settings.snapshot_interval)(schedule.take)
    return Pipeline(app, settings, seen_ids, dedup)
