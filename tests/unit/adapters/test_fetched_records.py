"""The native fetch decoding (``adapters/fetched_records.py``, ``native/src/lib.rs``) against
aiokafka's own loop on the same bytes: the same records (every ``ConsumerRecord`` field), the
same ``next_fetch_offset`` after each record and at the end, the same error.

The fetches are written by aiokafka's own batch builder (``DefaultRecordBatchBuilder``), in every
codec, with transactional batches of several producers, control batches (abort and commit
markers, written as a broker writes them), log-append time, a fetch position inside the fetched
batches, aborted transactions under read_committed, a partial last batch, and corruption with and
without the CRC check."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import dedupe_native
import pytest
from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters import fetched_records
from adapters.aiokafka_privates import source_hash
from adapters.fetched_records import (
    FETCHER_PINNED_SOURCES,
    KeptRecords,
    NativePartitionRecords,
)

TOPIC = "events"
FIELDS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "checksum",
    "serialized_key_size",
    "serialized_value_size",
    "headers",
)
CONTROL, LOG_APPEND = 0x20, 0x08


def _with_crc(batch: bytearray) -> bytearray:
    """The batch's CRC (Castagnoli, over attributes to the end) written again."""
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    return batch


def build_batch(
    base_offset: int,
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    codec: int = 0,
    producer_id: int = -1,
    transactional: bool = False,
    log_append: bool = False,
    offset_step: int = 1,
) -> bytes:
    """One v2 batch as aiokafka's producer writes it, placed at ``base_offset`` as the broker
    places it (and with log-append time set, as a broker configured so sets it)."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, 0, 0, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(i * offset_step, ts, key, value, headers) is not None
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    if log_append:
        attrs = struct.unpack_from(">h", batch, 21)[0] | LOG_APPEND
        struct.pack_into(">h", batch, 21, attrs)
        _with_crc(batch)
    return bytes(batch)


def control_batch(base_offset: int, producer_id: int, abort: bool, version: int = 0) -> bytes:
    """A transaction marker as the broker writes it: a transactional control batch of one
    record whose key is (version, type: 0 abort, 1 commit)."""
    key = struct.pack(">hh", version, 0 if abort else 1)
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, 0, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, key, struct.pack(">hi", 0, 0), [])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    attrs = struct.unpack_from(">h", batch, 21)[0] | CONTROL
    struct.pack_into(">h", batch, 21, attrs)
    return bytes(_with_crc(batch))


def drain(make: Callable[[], Any]) -> tuple[list[tuple[tuple[Any, ...], int]], int, str | None]:
    """Every record the loop yields with ``next_fetch_offset`` right after it, the final
    ``next_fetch_offset``, and the error it ends with (type and message), if any."""
    partition_records = make()
    out = []
    error = None
    try:
        for record in partition_records:
            fields = tuple(getattr(record, f) for f in FIELDS)
            out.append((fields, partition_records.next_fetch_offset))
    except Exception as exc:  # the same error from both loops is part of the contract
        error = f"{type(exc).__name__}: {exc}"
    return out, partition_records.next_fetch_offset, error


def both(
    data: bytes,
    fetch_offset: int,
    aborted: list[tuple[int, int]] | None,
    read_committed: bool,
    check_crcs: bool = True,
    topic: str = TOPIC,
) -> tuple[Any, Any]:
    tp = TopicPartition(topic, 3)
    level = READ_COMMITTED if read_committed else 0

    def aiokafka_loop() -> Any:
        return PartitionRecords(
            tp, KeptRecords(data), aborted, fetch_offset, None, None, check_crcs, level
        )

    def native_loop() -> Any:
        return NativePartitionRecords(
            tp, KeptRecords(data), aborted, fetch_offset, None, None, check_crcs, level
        )

    return drain(aiokafka_loop), drain(native_loop)


@pytest.fixture(autouse=True)
def native_installed() -> Any:
    fetched_records.install(dedupe_native, [TOPIC])
    yield
    fetched_records.uninstall()


# -- hypothesis: a fetch of batches aiokafka's builder wrote ------------------------------------

header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8))
record = st.tuples(
    st.integers(0, 2**41),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.lists(header, max_size=3),
)
batch_plan = st.fixed_dictionaries(
    {
        "records": st.lists(record, min_size=1, max_size=12),
        "codec": st.sampled_from([0, 0, 1, 2, 3, 4]),
        "producer": st.sampled_from([-1, 7, 8, 9]),
        "log_append": st.booleans(),
        "offset_step": st.sampled_from([1, 1, 2]),  # gaps: a compacted partition
        # after the batch: nothing, or a commit or abort marker of its producer
        "marker": st.sampled_from([None, None, "commit", "abort"]),
    }
)


@st.composite
def fetches(draw: Any) -> tuple[bytes, int, list[tuple[int, int]], list[int]]:
    """A fetch (its bytes), a fetch position, aborted transactions and the batches' offsets."""
    start = draw(st.integers(0, 10**12))
    offset, out, starts = start, b"", []
    aborted: list[tuple[int, int]] = []
    for plan in draw(st.lists(batch_plan, min_size=1, max_size=5)):
        transactional = plan["producer"] >= 0
        starts.append(offset)
        out += build_batch(
            offset,
            plan["records"],
            codec=plan["codec"],
            producer_id=plan["producer"],
            transactional=transactional,
            log_append=plan["log_append"],
            offset_step=plan["offset_step"],
        )
        if transactional and plan["marker"] == "abort":
            aborted.append((plan["producer"], offset))
        offset += (len(plan["records"]) - 1) * plan["offset_step"] + 1
        if transactional and plan["marker"] is not None:
            out += control_batch(offset, plan["producer"], plan["marker"] == "abort")
            offset += 1
    fetch_offset = draw(st.integers(start, offset))
    return out, fetch_offset, aborted, starts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fetches(), st.booleans(), st.integers(0, 60))
def test_native_and_aiokafka_loops_agree(fetch: Any, read_committed: bool, cut: int) -> None:
    data, fetch_offset, aborted, _ = fetch
    # The fetch may end inside a batch (fetch size limits): that batch is not read yet.
    data = data[: len(data) - cut] if cut < len(data) else data
    theirs, ours = both(data, fetch_offset, aborted, read_committed)
    assert ours == theirs
    # Nothing here is corrupt: the native decoder answered (it did not leave it to aiokafka).
    answer = dedupe_native.unpack(data, TOPIC, 3, fetch_offset, aborted, read_committed)
    assert answer is not None
    assert answer[1] == ours[1]


@settings(max_examples=300, deadline=None)
@given(fetches(), st.booleans(), st.data())
def test_corrupt_fetches_end_the_same(fetch: Any, check_crcs: bool, data: Any) -> None:
    """A flipped byte anywhere, with and without the consumer's CRC check: both loops yield the
    same records, then raise the same error at the same batch (or, where the byte was in a
    length that now ends the fetch early, stop at the same place)."""
    raw, fetch_offset, aborted, _ = fetch
    at = data.draw(st.integers(0, len(raw) - 1))
    bad = bytearray(raw)
    bad[at] ^= data.draw(st.integers(1, 255))
    theirs, ours = both(bytes(bad), fetch_offset, aborted, True, check_crcs)
    assert ours == theirs


def test_a_corrupt_batch_never_reaches_the_native_codecs() -> None:
    """An lz4 batch with a byte flipped in its frame, read by a consumer that does not check
    CRCs: aiokafka's codec refuses the frame, the Rust one accepts it. The native decoder checks
    the CRC anyway, so aiokafka's loop decodes it and the error is aiokafka's (found by
    hypothesis when the CRC check followed the consumer's)."""
    data = bytearray(build_batch(0, [(1, b"k", b"v" * 50, [])], codec=3))
    data[-3] ^= 0x55
    theirs, ours = both(bytes(data), 0, None, False, check_crcs=False)
    assert ours == theirs
    assert ours[2] is not None


class _State:
    """A partition's fetch state as aiokafka's subscription keeps it (position, paused)."""

    def __init__(self, position: int) -> None:
        self.position, self.paused = position, False

    def consumed_to(self, offset: int) -> None:
        self.position = offset


class _Assignment:
    active = True

    def __init__(self, state: _State) -> None:
        self._state = state

    def state_value(self, tp: TopicPartition) -> _State:
        return self._state


def taken_by_fetch_result(cls: type, data: bytes, fetch_offset: int, steps: list[int]) -> Any:
    """What the consumer takes from one fetch through aiokafka's ``FetchResult``: ``getall``
    with each ``max_records`` of ``steps`` (0: ``getone``), then ``getall`` for the rest, and
    the partition's position after each call."""
    tp = TopicPartition(TOPIC, 1)
    state = _State(fetch_offset)
    records = cls(tp, KeptRecords(data), None, fetch_offset, None, None, True, 0)
    result = fetcher.FetchResult(
        tp, assignment=_Assignment(state), partition_records=records, backoff=0
    )
    out = []
    for step in [*steps, None]:
        if not result.has_more():
            break  # the fetcher drops a drained result; nothing asks it again
        if step == 0:
            one = result.getone()
            got = [] if one is None else [one]
        else:
            got = result.getall(max_records=step)
        out.append(([tuple(getattr(r, f) for f in FIELDS) for r in got], state.position))
    return out


@settings(max_examples=200, deadline=None)
@given(fetches(), st.lists(st.integers(0, 7), max_size=6))
def test_fetch_results_take_the_same_records(fetch: Any, steps: list[int]) -> None:
    """Through aiokafka's ``FetchResult``, a call at a time (``getall`` with a cap, ``getone``),
    as the consumer takes a fetch: the same records per call and the same position after it."""
    data, fetch_offset, _, _ = fetch
    theirs = taken_by_fetch_result(PartitionRecords, data, fetch_offset, steps)
    ours = taken_by_fetch_result(NativePartitionRecords, data, fetch_offset, steps)
    assert ours == theirs


# -- cases by name -------------------------------------------------------------------------------


def test_records_come_from_the_native_decoder() -> None:
    """The loop under test is the native one (not aiokafka's behind it): a record of
    ``dedupe_native``'s own type, with every field of aiokafka's."""
    data = build_batch(5, [(1_700_000_000_000, b"k", b"v", [("h", b"1"), ("n", None)])])
    tp = TopicPartition(TOPIC, 0)
    records = list(NativePartitionRecords(tp, KeptRecords(data), None, 0, None, None, True, 0))
    assert [type(r) for r in records] == [dedupe_native.Record]
    (r,) = records
    assert (r.offset, r.key, r.value, r.headers) == (5, b"k", b"v", (("h", b"1"), ("n", None)))
    assert (r.serialized_key_size, r.serialized_value_size, r.checksum) == (1, 1, None)
    assert "offset=5" in repr(r)


def test_other_topics_and_deserializers_keep_aiokafkas_loop() -> None:
    data = build_batch(0, [(1, b"k", b"v", [])])
    other = NativePartitionRecords(
        TopicPartition("changelog", 0), KeptRecords(data), None, 0, None, None, True, 0
    )
    assert type(next(other)).__name__ == "ConsumerRecord"
    deserialized = NativePartitionRecords(
        TopicPartition(TOPIC, 0), KeptRecords(data), None, 0, bytes.upper, None, True, 0
    )
    assert next(deserialized).key == b"K"


def test_aborted_transaction_skipped_until_its_marker() -> None:
    """Producer 7's first transaction aborted, its second committed: read_committed yields only
    the second and the plain records; read_uncommitted yields all data records."""
    data = (
        build_batch(0, [(1, b"a", b"1", [])] * 2, producer_id=7, transactional=True)
        + control_batch(2, 7, abort=True)
        + build_batch(3, [(1, b"p", b"2", [])])
        + build_batch(4, [(1, b"b", b"3", [])], producer_id=7, transactional=True)
        + control_batch(5, 7, abort=False)
    )
    theirs, ours = both(data, 0, [(7, 0)], read_committed=True)
    assert ours == theirs
    assert [fields[2] for fields, _ in ours[0]] == [3, 4]
    assert ours[1] == 6
    theirs, ours = both(data, 0, [(7, 0)], read_committed=False)
    assert ours == theirs
    assert [fields[2] for fields, _ in ours[0]] == [0, 1, 3, 4]


def test_bad_crc_raises_after_the_good_batches() -> None:
    good = build_batch(0, [(1, b"a", b"1", [])])
    bad = bytearray(build_batch(1, [(1, b"b", b"2", [])]))
    bad[-1] ^= 0xFF
    theirs, ours = both(good + bytes(bad), 0, None, False)
    assert ours == theirs
    assert [fields[2] for fields, _ in ours[0]] == [0]
    assert ours[2] is not None and ours[2].startswith(CorruptRecordException.__name__)


def test_fetch_position_inside_a_batch() -> None:
    """A compressed batch fetched again from its middle: the records below the position skipped."""
    data = build_batch(10, [(1, bytes([i]), b"v", []) for i in range(6)], codec=4)
    theirs, ours = both(data, 13, None, False)
    assert ours == theirs
    assert [fields[2] for fields, _ in ours[0]] == [13, 14, 15]


def test_native_module_absent_means_aiokafkas_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(fetched_records.importlib, "import_module", refuse)
    assert fetched_records.load() is None


def test_install_replaces_the_fetchers_names() -> None:
    assert fetcher.PartitionRecords is NativePartitionRecords
    assert fetcher.MemoryRecords is KeptRecords
    fetched_records.uninstall()
    assert fetcher.PartitionRecords is PartitionRecords
    assert NativePartitionRecords.native is None


@pytest.mark.parametrize(("cls", "method", "why", "recorded"), FETCHER_PINNED_SOURCES)
def test_aiokafka_fetcher_code_is_what_was_read(
    cls: type, method: str, why: str, recorded: str
) -> None:
    assert source_hash(cls, method) == recorded, (
        f"aiokafka's {cls.__name__}.{method} ({why}) changed: read it against "
        "adapters/fetched_records.py and native/src/lib.rs, then record the new hash"
    )
