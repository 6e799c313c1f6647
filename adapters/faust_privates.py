"""Faust's (and mode's) private members, named in this module only: an upgrade that renames
one breaks here, and ``tests/unit/adapters/test_private_names.py`` says which.

Each shim is a Faust class overriding the private steps the worker changes, one override per
step, each one hop: a step the worker adds to calls Faust's step and then a hook named by what
it adds (``recovery_started``, ``consumer_idle``...), whose default does nothing; a step the
worker replaces calls the replacement (``drain_messages``...), which the subclass must define.
No public method relays to Faust's step for a subclass to call back. Faust's private attributes
are read and written through :class:`Alias` properties; one-off calls are plain functions
(:func:`crash`).
:data:`FAUST_PRIVATES` lists every Faust and mode member the worker relies on: the private ones
(named here) and the undocumented public ones, with the files that use them. This module
imports only Faust, mode and aiokafka, so ``tables/``, ``recovery/`` and ``app/`` all import it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import faust
from aiokafka import AIOKafkaConsumer
from faust.stores.base import SerializedStore
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.transport.consumer import TransactionManager as FaustTxns
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP, StoreT
from mode import Service
from mode.threads import ServiceThread

V = TypeVar("V")


class Alias(Generic[V]):
    """A public name for one of Faust's private instance attributes, read and written through."""

    def __init__(self, private: str) -> None:
        self.private = private

    def __get__(self, obj: Any, owner: type | None = None) -> V:
        return cast(V, getattr(obj, self.private))

    def __set__(self, obj: Any, value: V) -> None:
        setattr(obj, self.private, value)


def crash(app: Any, exc: BaseException) -> None:
    """Stop the worker on ``exc`` as Faust's own services do (``App._crash``)."""
    app._crash(exc)


def stopped(service: Any) -> Any:
    """mode's event of ``service`` set once it stopped (``Service._stopped``)."""
    return service._stopped


def consumer_thread(app: Any) -> Any:
    """The thread Faust's consumer of ``app`` runs aiokafka's consumer on."""
    return app.consumer._thread


def worker_consumer(thread: Any) -> AIOKafkaConsumer:
    """aiokafka's consumer of Faust's consumer ``thread``, started if it was not yet."""
    consumer: AIOKafkaConsumer = thread._ensure_consumer()
    return consumer


class RecoveryShim(Recovery):  # type: ignore[misc]
    """Faust's recovery service: its loop replaced by :meth:`slurp_changelogs`; hooks after its
    seek (:meth:`offsets_sought`) and at a recovery's start (:meth:`recovery_started`)."""

    actives_span = Alias[Any]("_actives_span")

    @Service.task  # type: ignore[untyped-decorator]
    async def _slurp_changelogs(self) -> None:
        # mode runs a class's tasks by attribute name: this one replaces Faust's loop.
        await self.slurp_changelogs()

    async def _seek_offsets(
        self, consumer: Any, tps: set[TP], offsets: Counter[TP], title: str
    ) -> None:
        await super()._seek_offsets(consumer, tps, offsets, title)
        await self.offsets_sought(consumer, offsets)

    def _set_recovery_started(self) -> None:
        super()._set_recovery_started()
        self.recovery_started()

    def set_recovery_ended(self) -> None:
        """Faust's end of a recovery (its flags, timings and log line)."""
        self._set_recovery_ended()

    async def offsets_sought(self, consumer: Any, offsets: Counter[TP]) -> None:
        """After Faust sought ``consumer`` to ``offsets`` (the active or the standby ones)."""

    def recovery_started(self) -> None:
        """After Faust marked a recovery started."""

    if TYPE_CHECKING:  # what the subclass provides

        async def slurp_changelogs(self) -> None: ...


class TableManagerShim(TableManager):  # type: ignore[misc]
    """Faust's table manager; its lazily built recovery service and changelog queue."""

    recovery_built = Alias[Recovery | None]("_recovery")


class AppShim(faust.App):  # type: ignore[misc]
    """Faust's app: its transport made by :meth:`new_transport`; :meth:`consumer_idle` awaited
    once Faust's wait for the agents to finish their current records (a rebalance, a stop)
    ended."""

    def _new_transport(self) -> Any:
        return self.new_transport()

    async def _consumer_wait_empty(self, consumer: Any, logger: Any) -> None:
        await super()._consumer_wait_empty(consumer, logger)
        await self.consumer_idle()

    async def consumer_idle(self) -> None:
        """Called once the agents finished their current records."""

    if TYPE_CHECKING:  # what the subclass provides

        def new_transport(self) -> Any: ...


class TableShim(faust.Table):  # type: ignore[misc]
    """Faust's table: its store (built on first use) made by :meth:`new_store`."""

    def _new_store(self) -> StoreT:
        return self.new_store()

    if TYPE_CHECKING:  # what the subclass provides

        def new_store(self) -> StoreT: ...

    def store_url(self) -> Any:
        """The store URL the table was given, else the app's (``store=`` setting)."""
        return self._store or self.app.conf.store


class StoreShim(SerializedStore):  # type: ignore[misc]
    """Faust's store of serialized keys and values: its mapping steps under public names, each
    taking and giving raw bytes."""

    def _get(self, key: bytes) -> bytes | None:
        return self.get_raw(key)

    def _set(self, key: bytes, value: bytes | None) -> None:
        self.set_raw(key, value)

    def _del(self, key: bytes) -> None:
        self.del_raw(key)

    def _contains(self, key: bytes) -> bool:
        return self.contains_raw(key)

    def _iterkeys(self) -> Iterator[bytes]:
        return self.iterkeys_raw()

    def _itervalues(self) -> Iterator[bytes]:
        return self.itervalues_raw()

    def _iteritems(self) -> Iterator[tuple[bytes, bytes]]:
        return self.iteritems_raw()

    def _size(self) -> int:
        return self.size_raw()

    def _clear(self) -> None:
        self.clear_raw()

    if TYPE_CHECKING:  # what the subclass provides

        def get_raw(self, key: bytes) -> bytes | None: ...
        def set_raw(self, key: bytes, value: bytes | None) -> None: ...
        def del_raw(self, key: bytes) -> None: ...
        def contains_raw(self, key: bytes) -> bool: ...
        def iterkeys_raw(self) -> Iterator[bytes]: ...
        def itervalues_raw(self) -> Iterator[bytes]: ...
        def iteritems_raw(self) -> Iterator[tuple[bytes, bytes]]: ...
        def size_raw(self) -> int: ...
        def clear_raw(self) -> None: ...


class ConsumerThreadShim(AIOKafkaConsumerThread):  # type: ignore[misc]
    """Faust's consumer thread: :meth:`configure_consumer` on aiokafka's consumer once Faust
    made it, each fetch call's record cap from :meth:`max_records` (Faust sets none), and the
    highwaters from :meth:`fetch_highwaters`."""

    def _create_worker_consumer(self, transport: Any) -> AIOKafkaConsumer:
        consumer: AIOKafkaConsumer = super()._create_worker_consumer(transport)
        self.configure_consumer(consumer)
        return consumer

    async def _fetch_records(
        self,
        consumer: AIOKafkaConsumer,
        active_partitions: set[TP],
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Mapping[TP, list[Any]]:
        records: Mapping[TP, list[Any]] = await super()._fetch_records(
            consumer,
            active_partitions,
            timeout=timeout,
            max_records=self.max_records() if max_records is None else max_records,
        )
        return records

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        return await self.fetch_highwaters(partitions)

    def configure_consumer(self, consumer: AIOKafkaConsumer) -> None:
        """After Faust made its aiokafka consumer, before it starts."""

    def max_records(self) -> int | None:
        """The records one fetch call parses at most (None: a whole fetch response)."""
        return None

    if TYPE_CHECKING:  # what the subclass provides

        async def fetch_highwaters(self, partitions: list[TP]) -> Mapping[TP, int]: ...


class ConsumerShim(FaustConsumer):  # type: ignore[misc]
    """Faust's aiokafka consumer: its thread made by :meth:`new_consumer_thread`, its loop from
    fetched records to the app replaced by :meth:`drain_messages`; the fetch and the record
    conversion that loop calls under public names."""

    #: Per partition, the offset of the last record handed on (None: none yet).
    read_offsets = Alias[dict[TP, int | None]]("_read_offset")
    #: Partitions whose fetched records wait in Faust's buffers.
    buffered_partitions = Alias[set[TP]]("_buffered_partitions")

    def _new_consumer_thread(self) -> Any:
        return self.new_consumer_thread()

    async def _drain_messages(self, fetcher: Any) -> None:
        await self.drain_messages(fetcher)

    async def wait_next_records(
        self, timeout: float
    ) -> tuple[Mapping[TP, list[Any]] | None, set[TP] | None]:
        result: tuple[Mapping[TP, list[Any]] | None, set[TP] | None]
        result = await self._wait_next_records(timeout)
        return result

    def to_message(self, tp: TP, record: Any) -> Any:
        return self._to_message(tp, record)

    if TYPE_CHECKING:  # what the subclass provides

        def new_consumer_thread(self) -> Any: ...
        async def drain_messages(self, fetcher: Any) -> None: ...


HERE, CONSUMER, APP = "adapters/faust_privates.py", "app/eos/consumer.py", "app/worker/factory.py"
RECOVERY = "recovery/faust_adapter.py"
_RECOVERY = """_slurp_changelogs _seek_offsets _set_recovery_started _set_recovery_ended
    _actives_span"""
_RECOVERY_PUBLIC = """need_recovery active_remaining signal_recovery_end active_offsets
    active_tps standby_tps in_recovery add_standby on_rebalance tp_to_table active_highwaters"""
_MANAGER_PUBLIC = "changelog_queue"
_STORE = "_get _set _del _contains _iterkeys _itervalues _iteritems _size _clear"
_CONSUMER = """_new_consumer_thread _drain_messages _wait_next_records _to_message _read_offset
    _buffered_partitions _thread"""
_CONSUMER_PUBLIC = "perform_seek consumer_stopped_errors suspend_flow flow_active"
_THREAD = "_highwaters _fetch_records _create_worker_consumer _ensure_consumer"
#: ``(class, member, files that name it)``: every Faust and mode member the worker relies on.
#: The underscored ones are named in this module only (tests/unit/adapters/test_private_names.py).
FAUST_PRIVATES: list[tuple[type, str, str]] = [
    (TableManager, "_recovery", HERE),
    *((TableManager, n, RECOVERY) for n in _MANAGER_PUBLIC.split()),
    *((Recovery, name, HERE) for name in _RECOVERY.split()),
    *((Recovery, name, RECOVERY) for name in _RECOVERY_PUBLIC.split()),
    (Recovery, "completed", f"app/web/views.py, {CONSUMER}"),
    *((faust.App, n, HERE) for n in ("_crash", "_new_transport", "_consumer_wait_empty")),
    (faust.App, "on_init_dependencies", APP),
    (faust.App, "in_transaction", f"{APP}, app/eos/*"),
    (faust.App, "rebalancing", f"app/web/views.py, {CONSUMER}"),
    *((faust.Table, name, HERE) for name in ("_new_store", "_store")),
    *((SerializedStore, name, HERE) for name in _STORE.split()),
    *((FaustConsumer, name, HERE) for name in _CONSUMER.split()),
    *((FaustConsumer, name, CONSUMER) for name in _CONSUMER_PUBLIC.split()),
    *((AIOKafkaConsumerThread, name, HERE) for name in _THREAD.split()),
    (ServiceThread, "thread_loop", CONSUMER),
    (Service, "_stopped", HERE),
    *((FaustTxns, n, "app/eos/manager.py") for n in ("on_rebalance", "on_partitions_revoked")),
]
