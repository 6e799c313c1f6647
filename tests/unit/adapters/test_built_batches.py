"""The native batch builder (``adapters/built_batches.py``, ``native/src/batch_builder.rs``)
against aiokafka's ``BatchBuilder`` on the same appends: the same answers (taken, or refused
when full, and closed after), the same sizes and counts, and once built with the same producer
state, the same bytes uncompressed and the same batch and records with zstd; a CRC aiokafka's
reader accepts."""

from __future__ import annotations

import time
from typing import Any

import dedupe_native
import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.aiokafka_privates import source_hash
from adapters.built_batches import (
    MESSAGE_BATCH_PINNED_SOURCES,
    append_pairs,
    append_records,
    batch_maker,
    is_native,
)

CODECS = {"none": 0, "zstd": 4}

payloads = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        payloads,
        # Record times of every kind, before the first one's too (a negative delta).
        st.integers(min_value=0, max_value=2**42),
        headers,
    ),
    max_size=60,
)
batch_sizes = st.integers(min_value=61, max_value=3_000)
#: Records a batch may hold already: (key, value) pairs.
pairs_before = st.lists(st.tuples(st.binary(max_size=40), payloads), max_size=3)
producer_states = st.tuples(
    st.integers(min_value=-1, max_value=2**40),
    st.integers(min_value=-1, max_value=2**15 - 1),
    st.integers(min_value=0, max_value=2**31 - 1),
)


def fields(batch: DefaultRecordBatch) -> dict[str, Any]:
    """Every header field and every record's."""
    return {
        "head": (
            batch.base_offset,
            batch.magic,
            batch.is_transactional,
            batch.is_control_batch,
            batch.compression_type,
            batch.timestamp_type,
            batch.last_offset_delta,
            batch.first_timestamp,
            batch.max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
        ),
        "records": [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in batch  # type: ignore[attr-defined]
        ],
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(sorted(CODECS)),
    transactional=st.booleans(),
    batch_size=batch_sizes,
    appends=records,
    state=producer_states,
)
def test_the_native_builder_builds_what_aiokafka_s_builds(
    codec: str,
    transactional: bool,
    batch_size: int,
    appends: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    state: tuple[int, int, int],
) -> None:
    ours = dedupe_native.BatchBuilder(batch_size, CODECS[codec], is_transactional=transactional)
    theirs = BatchBuilder(batch_size, CODECS[codec], is_transactional=transactional)
    for key, value, timestamp, hdrs in appends:
        record = {"timestamp": timestamp, "key": key, "value": value, "headers": hdrs}
        taken = theirs.append(**record) is not None
        assert (ours.append(**record) is not None) is taken
        assert ours.closed() is theirs.closed()
        assert (ours.record_count(), ours.size()) == (theirs.record_count(), theirs.size())
        if not taken:
            assert ours.append(**record) is None  # closed: nothing more
            break
    if not appends:
        return  # the worker never sends an empty batch
    ours._set_producer_state(*state)
    theirs._set_producer_state(*state)
    built, expected = ours._build(), bytes(theirs._build())
    assert ours._build() is built  # a retry sends the same bytes
    assert ours.size() == len(built) and ours.closed()
    if codec == "none":
        assert built == expected
    ours_batch, theirs_batch = DefaultRecordBatch(built), DefaultRecordBatch(expected)
    assert ours_batch.validate_crc()
    assert fields(ours_batch) == fields(theirs_batch)
    assert ours_batch.compression_type == theirs_batch.compression_type == CODECS[codec]


pairs = st.lists(st.tuples(st.binary(max_size=40), payloads), max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch_size=batch_sizes,
    before=pairs_before,
    records=pairs,
    start=st.integers(min_value=0, max_value=5),
)
def test_pairs_appended_in_one_call_are_the_records_appended_one_by_one(
    batch_size: int,
    before: list[tuple[bytes, bytes | None]],
    records: list[tuple[bytes, bytes | None]],
    start: int,
) -> None:
    """The native builder's ``extend`` (a commit's changelog records in one call) against
    aiokafka's builder taking the same records one ``append`` each, at one time: the same index
    where the batch refused one, the same counts, sizes and closed state, and the same bytes
    (uncompressed; zstd's build is held to aiokafka's above). The batch may hold records
    already (``before``), and ``start`` skips records already sent. Then ``append_pairs``,
    which runs either builder, gives the same answers on both at the time of now."""
    start = min(start, len(records))
    ours = batch_maker(dedupe_native, batch_size, 0)()
    theirs = batch_maker(None, batch_size, 0)()
    for key, value in before:
        record = {"timestamp": 7, "key": key, "value": value, "headers": []}
        taken = theirs.append(**record) is not None
        assert (ours.append(**record) is not None) is taken
    stop = len(records)
    for i in range(start, len(records)):
        key, value = records[i]
        if theirs.append(timestamp=7, key=key, value=value, headers=[]) is None:
            stop = i
            break
    assert ours.extend(records, start, timestamp=7) == stop
    assert (ours.record_count(), ours.size(), ours.closed()) == (
        theirs.record_count(),
        theirs.size(),
        theirs.closed(),
    )
    if ours.record_count():
        ours._set_producer_state(1, 0, 0)
        theirs._set_producer_state(1, 0, 0)
        assert ours._build() == bytes(theirs._build())
    ours, theirs = batch_maker(dedupe_native, batch_size, 0)(), batch_maker(None, batch_size, 0)()
    assert append_pairs(ours, records, start) == append_pairs(theirs, records, start)
    assert (ours.record_count(), ours.size(), ours.closed()) == (
        theirs.record_count(),
        theirs.size(),
        theirs.closed(),
    )


whole_records = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**42),
        st.none() | st.binary(max_size=40),
        payloads,
        # As the dedup loop hands them over: a fetched record's tuple, a list, or none.
        st.none() | headers.map(tuple) | headers,
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch_size=batch_sizes,
    before=pairs_before,
    records=whole_records,
    start=st.integers(min_value=0, max_value=5),
)
def test_records_appended_in_one_call_are_the_records_appended_one_by_one(
    batch_size: int,
    before: list[tuple[bytes, bytes | None]],
    records: list[Any],
    start: int,
) -> None:
    """``append_records`` (a dedup span's first sightings in one call: the native builder's
    ``extend_records``) against aiokafka's builder taking the same records one ``append``
    each: the same index where the batch refused one, the same counts, sizes and closed state,
    the same bytes. On aiokafka's builder, ``append_records`` gives the same answers too."""
    start = min(start, len(records))
    ours = batch_maker(dedupe_native, batch_size, 0)()
    theirs = batch_maker(None, batch_size, 0)()
    fallback = batch_maker(None, batch_size, 0)()
    for key, value in before:
        record = {"timestamp": 7, "key": key, "value": value, "headers": []}
        taken = theirs.append(**record) is not None
        assert (ours.append(**record) is not None) is taken
        assert (fallback.append(**record) is not None) is taken
    stop = len(records)
    for i in range(start, len(records)):
        timestamp, key, value, hdrs = records[i]
        record = {"timestamp": timestamp, "key": key, "value": value, "headers": list(hdrs or [])}
        if theirs.append(**record) is None:
            stop = i
            break
    assert append_records(ours, records, start) == stop
    assert append_records(fallback, records, start) == stop
    for built in (ours, fallback):
        assert (built.record_count(), built.size(), built.closed()) == (
            theirs.record_count(),
            theirs.size(),
            theirs.closed(),
        )
    if ours.record_count():
        for built in (ours, fallback, theirs):
            built._set_producer_state(1, 0, 0)
        assert ours._build() == bytes(theirs._build()) == bytes(fallback._build())


def test_append_records_takes_the_time_of_now_and_refuses_what_is_not_a_record() -> None:
    ours = batch_maker(dedupe_native, 1_000, 0)()
    before = int(time.time() * 1000)
    assert append_records(ours, [(None, b"k", b"v", None)]) == 1
    built = list(DefaultRecordBatch(ours._build()))  # type: ignore[call-overload]
    assert before <= built[0].timestamp <= int(time.time() * 1000)
    bad = batch_maker(dedupe_native, 1_000, 0)()
    with pytest.raises(TypeError, match="timestamp, key, value, headers"):
        bad.extend_records([(b"k", b"v")])


def test_append_pairs_takes_the_time_of_now_and_refuses_what_is_not_a_pair() -> None:
    ours = batch_maker(dedupe_native, 1 << 20, 4)()
    before = int(time.time() * 1000)
    assert append_pairs(ours, [(b"a", b"1"), (b"b", None)]) == 2
    after = int(time.time() * 1000)
    built = list(DefaultRecordBatch(ours._build()))  # type: ignore[call-overload]
    assert [(r.key, r.value) for r in built] == [(b"a", b"1"), (b"b", None)]
    assert all(before <= r.timestamp <= after for r in built)
    fresh = batch_maker(dedupe_native, 1 << 20, 0)()
    with pytest.raises(TypeError, match="tuple"):
        append_pairs(fresh, [[b"k", b"v"]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="value"):
        append_pairs(fresh, [(b"k", "text")])  # type: ignore[list-item]


def test_a_record_without_a_time_takes_the_time_of_its_append() -> None:
    ours = dedupe_native.BatchBuilder(1 << 20, 4, is_transactional=True)
    before = int(time.time() * 1000)
    assert ours.append(timestamp=None, key=b"k", value=None)
    assert ours.append(timestamp=None, key=None, value=b"v", headers=None)
    after = int(time.time() * 1000)
    built = DefaultRecordBatch(ours._build())
    times = [r.timestamp for r in built]  # type: ignore[attr-defined]
    assert all(before <= t <= after for t in times), (before, times, after)


def test_the_first_record_is_taken_whatever_its_size() -> None:
    ours = dedupe_native.BatchBuilder(100, 0, is_transactional=True)
    assert ours.append(timestamp=1, key=b"k", value=b"x" * 1_000)
    assert ours.append(timestamp=1, key=b"k", value=b"x") is None and ours.closed()


def test_bad_input_is_refused_by_name() -> None:
    ours = dedupe_native.BatchBuilder(1 << 20, 0)
    with pytest.raises(TypeError, match="key"):
        ours.append(timestamp=1, key="text", value=b"v")
    with pytest.raises(TypeError, match="value"):
        ours.append(timestamp=1, key=b"k", value=3)
    with pytest.raises(TypeError, match="header"):
        ours.append(timestamp=1, key=b"k", value=b"v", headers=[(b"bytes-key", b"v")])
    assert ours.record_count() == 0  # nothing of a refused record was kept
    with pytest.raises(ValueError, match="codec 1"):
        dedupe_native.BatchBuilder(1 << 20, 1)
    ours.append(timestamp=1, key=b"k", value=b"v")
    ours._build()
    with pytest.raises(RuntimeError, match="built already"):
        ours._set_producer_state(1, 0, 0)


@pytest.mark.parametrize(
    ("native", "codec", "built_natively"),
    [
        (dedupe_native, 0, True),
        (dedupe_native, 4, True),
        (dedupe_native, 1, False),  # gzip, snappy, lz4: aiokafka's builder
        (dedupe_native, 2, False),
        (dedupe_native, 3, False),
        (None, 0, False),  # DEDUPE_NATIVE_RECORDS=off, or no extension
    ],
)
def test_the_batch_maker_builds_natively_only_the_codecs_it_writes(
    native: Any, codec: int, built_natively: bool
) -> None:
    batch = batch_maker(native, 1 << 20, codec)()
    assert is_native(batch) is built_natively
    assert batch.append(timestamp=1, key=b"k", value=b"v", headers=[]) is not None
    batch._set_producer_state(7, 1, 0)
    built = DefaultRecordBatch(bytes(batch._build()))
    assert built.is_transactional and built.producer_id == 7


@pytest.mark.parametrize(("cls", "method", "why", "recorded"), MESSAGE_BATCH_PINNED_SOURCES)
def test_aiokafka_batch_code_is_what_was_read(
    cls: type, method: str, why: str, recorded: str
) -> None:
    assert source_hash(cls, method) == recorded, (
        f"aiokafka's {cls.__name__}.{method} ({why}) changed: read it against "
        "adapters/built_batches.py and native/src/batch_builder.rs, then record the new hash"
    )
