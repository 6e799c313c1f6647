"""Every private (or undocumented) name of Faust, mode and aiokafka that the worker relies on,
checked against the installed versions: a version bump that renames one fails here in seconds,
not in the fault tier. When one fails, the comment beside it says which of our modules uses
it; fix that module, then the list. aiokafka's are listed, and reached, in
``app/eos/aiokafka_privates.py`` (with ``app/eos/txn_v2.py``, whose subclasses override private
steps); no other module of ``app/`` names one (checked below). Faust's are listed here:
``app/eos/consumer.py`` and ``tables/recovery.py`` hold nearly all of them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from faust import App
from faust.stores.base import SerializedStore
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.transport.consumer import TransactionManager
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from mode.threads import ServiceThread

from app.eos.aiokafka_privates import PRIVATE_NAMES


def defines(cls: type, name: str) -> bool:
    """``cls`` (or a base) has ``name`` as a class attribute, or assigns ``self.<name>``."""
    if hasattr(cls, name):
        return True
    pattern = re.compile(rf"self\.{re.escape(name)}\b\s*(:[^=\n]*)?=")
    for klass in inspect.getmro(cls):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if pattern.search(source):
            return True
    return False


#: aiokafka's names come from their one home (app/eos/aiokafka_privates.py); Faust's and mode's
#: are listed here.
USED: list[tuple[type, str, str]] = [
    *PRIVATE_NAMES,
    # Faust's consumer and its thread (app/eos/consumer.py)
    (AIOKafkaConsumerThread, "_create_worker_consumer", "consumer.py"),
    (AIOKafkaConsumerThread, "_highwaters", "consumer.py"),
    (AIOKafkaConsumerThread, "_fetch_records", "consumer.py: ConsumerThread._fetch_records"),
    (AIOKafkaConsumerThread, "_ensure_consumer", "consumer.py, manager.py"),
    (ServiceThread, "thread_loop", "manager.py"),
    (FaustConsumer, "_new_consumer_thread", "consumer.py"),
    (FaustConsumer, "_drain_messages", "consumer.py"),
    (FaustConsumer, "_wait_next_records", "consumer.py"),
    (FaustConsumer, "_to_message", "consumer.py"),
    (FaustConsumer, "_read_offset", "consumer.py"),
    (FaustConsumer, "_buffered_partitions", "consumer.py"),
    (FaustConsumer, "_thread", "manager.py"),
    (FaustConsumer, "perform_seek", "consumer.py"),
    (FaustConsumer, "consumer_stopped_errors", "consumer.py"),
    (FaustConsumer, "suspend_flow", "consumer.py"),
    (FaustConsumer, "flow_active", "consumer.py, manager.py"),
    (TransactionManager, "on_rebalance", "manager.py"),
    (TransactionManager, "on_partitions_revoked", "manager.py"),
    # Faust's app (app/factory.py, app/eos/manager.py)
    (App, "_new_transport", "factory.py"),
    (App, "_consumer_wait_empty", "factory.py"),
    (App, "on_init_dependencies", "factory.py"),
    (App, "_crash", "manager.py"),
    (App, "rebalancing", "manager.py, web.py"),
    (App, "in_transaction", "factory.py"),
    # Faust's tables and recovery (tables/recovery.py)
    (TableManager, "_recovery", "recovery.py"),
    (TableManager, "_changelog_queue", "recovery.py"),
    (Recovery, "_slurp_changelogs", "recovery.py"),
    (Recovery, "_seek_offsets", "recovery.py"),
    (Recovery, "_set_recovery_ended", "recovery.py"),
    (Recovery, "_active_events_received_at", "recovery.py"),
    (Recovery, "_standby_events_received_at", "recovery.py"),
    (Recovery, "_last_active_event_processed_at", "recovery.py"),
    (Recovery, "_processing_times", "recovery.py"),
    (Recovery, "_last_flush_at", "recovery.py"),
    (Recovery, "_actives_span", "recovery.py"),
    (Recovery, "_standbys_span", "recovery.py"),
    (Recovery, "num_samples_required_for_estimate", "recovery.py"),
    (Recovery, "buffers", "recovery.py"),
    (Recovery, "buffer_sizes", "recovery.py"),
    (Recovery, "flush_buffers", "recovery.py"),
    (Recovery, "need_recovery", "recovery.py"),
    (Recovery, "active_remaining", "recovery.py"),
    (Recovery, "standby_remaining_total", "recovery.py"),
    (Recovery, "signal_recovery_end", "recovery.py"),
    (Recovery, "tp_to_table", "recovery.py"),
    (Recovery, "active_highwaters", "recovery.py"),
    (Recovery, "completed", "web.py, manager.py"),
    # Faust's store extension points (tables/store_mapping.py)
    (SerializedStore, "_get", "store_mapping.py"),
    (SerializedStore, "_set", "store_mapping.py"),
    (SerializedStore, "_del", "store_mapping.py"),
    (SerializedStore, "_iteritems", "store_mapping.py"),
]


@pytest.mark.parametrize(
    ("cls", "name", "used_in"), USED, ids=[f"{c.__name__}.{n}" for c, n, _ in USED]
)
def test_a_name_the_worker_relies_on_still_exists(cls: type, name: str, used_in: str) -> None:
    assert defines(cls, name), (
        f"{cls.__module__}.{cls.__qualname__}.{name} is gone (used in {used_in})"
    )


def test_the_check_finds_a_missing_name() -> None:
    assert not defines(Recovery, "_no_such_attribute")
    assert defines(Recovery, "_processing_times")  # assigned in __init__, no class attribute


APP = Path(__file__).resolve().parents[2] / "app"
#: The modules allowed to name aiokafka's private attributes.
AIOKAFKA_HOMES = {APP / "eos" / "aiokafka_privates.py", APP / "eos" / "txn_v2.py"}


def aiokafka_private_uses(text: str) -> list[str]:
    """Each ``<something>._<name>`` in ``text`` whose ``_<name>`` is one of aiokafka's private
    names (an object's own ``self._<name>`` is its own attribute, not aiokafka's)."""
    names = sorted({n for _, n, _ in PRIVATE_NAMES if n.startswith("_")}, key=len, reverse=True)
    pattern = re.compile(r"(?<!\bself)\.(" + "|".join(map(re.escape, names)) + r")\b")
    return [m.group(0) for m in pattern.finditer(text)]


def test_no_module_of_app_but_the_adapter_names_an_aiokafka_private() -> None:
    found = {
        str(path.relative_to(APP.parent)): uses
        for path in sorted(APP.rglob("*.py"))
        if path not in AIOKAFKA_HOMES and (uses := aiokafka_private_uses(path.read_text()))
    }
    assert found == {}


def test_the_adapter_check_finds_a_private_name() -> None:
    assert aiokafka_private_uses("producer._txn_manager.x; self._txn_manager") == ["._txn_manager"]
