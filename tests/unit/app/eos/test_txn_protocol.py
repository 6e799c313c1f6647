"""ApiVersions v3+ as ``app/eos/txn_protocol.py`` spells it, against bytes written out here from
Kafka's ``ApiVersionsRequest.json`` / ``ApiVersionsResponse.json`` (flexible from v3: unsigned
varint lengths + 1 for compact strings and arrays, a tagged-field section after each structure;
the response header stays v0), and the choice of protocol."""

from __future__ import annotations

import struct
from io import BytesIO

import pytest
from aiokafka import __version__ as aiokafka_version
from aiokafka.errors import UnsupportedVersionError
from aiokafka.protocol.admin import ApiVersionRequest_v0

from app.eos.txn_messages import (
    CLIENT_SOFTWARE_NAME,
    ApiVersionsRequest_v3,
    ApiVersionsRequest_v4,
    ApiVersionsWithFeatures,
)
from app.eos.txn_protocol import (
    FinalizedFeatures,
    ProtocolRefused,
    choose,
    finalized_features,
)


def compact_string(text: str) -> bytes:
    data = text.encode()
    assert len(data) + 1 < 0x80  # one varint byte
    return bytes([len(data) + 1]) + data


def tagged(tag: int, payload: bytes) -> bytes:
    assert tag < 0x80 and len(payload) < 0x80
    return bytes([tag, len(payload)]) + payload


def response_frame(correlation_id: int, error_code: int, tags: list[bytes]) -> bytes:
    """An ApiVersionsResponse v3/v4 as the broker sends it (after the size)."""
    header = struct.pack(">i", correlation_id)  # header v0: no tagged fields
    api_keys = bytes([2]) + struct.pack(">hhh", 18, 0, 4) + b"\x00"  # one entry, its tags
    throttle = struct.pack(">i", 0)
    return (
        header
        + struct.pack(">h", error_code)
        + api_keys
        + throttle
        + bytes([len(tags)])
        + b"".join(tags)
    )


def features(*levels: tuple[str, int, int]) -> bytes:
    """The FinalizedFeatures tagged field's value: (name, max level, min level) entries."""
    entries = b"".join(
        compact_string(name) + struct.pack(">hh", max_level, min_level) + b"\x00"
        for name, max_level, min_level in levels
    )
    return bytes([len(levels) + 1]) + entries


def epoch(value: int) -> bytes:
    return struct.pack(">q", value)


def decode(frame: bytes, request: object) -> object:
    """As aiokafka's connection does with a frame (``AIOKafkaConnection._handle_frame``)."""
    buffer = BytesIO(frame)
    header = request.parse_response_header(buffer)  # type: ignore[attr-defined]
    assert header.correlation_id == 7
    response = request.RESPONSE_TYPE.decode(buffer)  # type: ignore[attr-defined]
    assert buffer.read() == b"", "the whole frame is read"
    return response


@pytest.mark.parametrize(
    ("broker_range", "expected"),
    [
        ((0, 4), ApiVersionsRequest_v4),
        ((0, 3), ApiVersionsRequest_v3),
        ((0, 2), ApiVersionRequest_v0),  # no features below v3: v0 says as much
    ],
)
def test_the_newest_version_both_know_is_sent(
    broker_range: tuple[int, int], expected: type
) -> None:
    assert type(ApiVersionsWithFeatures().prepare({18: broker_range})) is expected


def test_request_v4_bytes() -> None:
    request = ApiVersionsWithFeatures().prepare({18: (0, 4)})
    header = request.build_request_header(correlation_id=7, client_id="c").encode()
    # Request header v2: api key, version, correlation id, client id (int16 length), no tags.
    assert header == struct.pack(">hhih", 18, 4, 7, 1) + b"c" + b"\x00"
    assert request.encode() == (
        compact_string(CLIENT_SOFTWARE_NAME) + compact_string(aiokafka_version) + b"\x00"
    )


def test_response_with_transaction_version_2() -> None:
    frame = response_frame(
        7,
        0,
        [
            tagged(1, epoch(65)),
            tagged(
                2,
                features(("group.version", 1, 1), ("transaction.version", 2, 2)),
            ),
            tagged(3, b"\x00"),  # ZkMigrationReady: a tag we do not read is skipped
        ],
    )
    found = finalized_features(decode(frame, ApiVersionsWithFeatures().prepare({18: (0, 4)})))
    assert found == FinalizedFeatures(65, {"group.version": 1, "transaction.version": 2})
    assert found.transaction_version == 2


@pytest.mark.parametrize(
    ("tags", "version"),
    [
        pytest.param(
            [tagged(1, epoch(3)), tagged(2, features(("transaction.version", 1, 1)))],
            1,
            id="finalized-1",
        ),
        pytest.param(
            [tagged(1, epoch(3)), tagged(2, features(("transaction.version", 0, 0)))],
            1,
            id="finalized-0",
        ),
        pytest.param(
            [tagged(1, epoch(3)), tagged(2, features(("group.version", 1, 1)))], 1, id="absent"
        ),
        pytest.param([], 1, id="no-features"),
    ],
)
def test_below_2_counts_as_1(tags: list[bytes], version: int) -> None:
    frame = response_frame(7, 0, tags)
    found = finalized_features(decode(frame, ApiVersionsWithFeatures().prepare({18: (0, 3)})))
    assert found.transaction_version == version


def test_a_v0_response_has_no_features() -> None:
    frame = struct.pack(">ihi", 7, 0, 1) + struct.pack(">hhh", 18, 0, 2)
    found = finalized_features(decode(frame, ApiVersionsWithFeatures().prepare({18: (0, 2)})))
    assert found == FinalizedFeatures(-1, {})
    assert found.transaction_version == 1


def test_an_error_code_raises() -> None:
    frame = response_frame(7, 35, [])  # UNSUPPORTED_VERSION
    response = decode(frame, ApiVersionsWithFeatures().prepare({18: (0, 4)}))
    with pytest.raises(UnsupportedVersionError):
        finalized_features(response)


@pytest.mark.parametrize(
    ("setting", "cluster", "running"),
    [("auto", 1, "v1"), ("auto", 2, "v2"), ("v1", 1, "v1"), ("v1", 2, "v1"), ("v2", 2, "v2")],
)
def test_choose(setting: str, cluster: int, running: str) -> None:
    chosen = choose(setting, cluster)
    assert (chosen.running, chosen.setting, chosen.cluster_transaction_version) == (
        running,
        setting,
        cluster,
    )
    assert chosen.stats() == {
        "protocol": running,
        "setting": setting,
        "cluster_transaction_version": cluster,
    }
    assert f"protocol {running} (DEDUPE_TRANSACTION_PROTOCOL={setting}" in chosen.describe()
    assert f"transaction.version={cluster}" in chosen.describe()


def test_v2_on_a_cluster_without_it_is_refused() -> None:
    with pytest.raises(ProtocolRefused, match="DEDUPE_TRANSACTION_PROTOCOL=v2, but the cluster"):
        choose("v2", 1)
