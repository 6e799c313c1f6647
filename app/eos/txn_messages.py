"""The Kafka requests of the transaction protocol choice and of the v2 flow that aiokafka (0.14)
does not have, spelt from Kafka's message schemas (``clients/src/main/resources/common/message/
*.json``; the versions below as Kafka 4.3's generated ``*Data.SCHEMAS`` print them).

All are flexible versions: compact strings and arrays (unsigned varint length + 1, 0 for null),
a tagged-field section ending every structure (a varint count, then tag, size, bytes), request
header v2 and response header v1, except ApiVersions' response header: v0 at every version.

- ApiVersions v3/v4: the cluster's finalized features (tag 1: their epoch, tag 2: the list).
- InitProducerId v5, EndTxn v5 (its response carries the producer id and epoch to use next),
  TxnOffsetCommit v5, Produce v12: the transaction v2 (KIP-890) flow (app/eos/txn_v2.py).
- DescribeProducers v0, WriteTxnMarkers v1: who holds a hanging transaction open, and its
  marker written for an old producer id (app/eos/hanging.py).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from aiokafka import __version__ as aiokafka_version
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.api import Request, RequestStruct, Response, ResponseHeader_v0
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactBytes,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import TopicPartition

#: The error code of TRANSACTION_ABORTABLE (KIP-890), which aiokafka does not know.
TRANSACTION_ABORTABLE = 120
STRING = CompactString("utf-8")
#: An empty tagged-field section (we send no tagged field).
NO_TAGS: dict[int, bytes] = {}


def struct(*fields: tuple[str, Any]) -> Schema:
    """A flexible structure: its fields, then its tagged fields."""
    return Schema(*fields, ("tags", TaggedFields))


def array(*fields: tuple[str, Any]) -> CompactArray:
    """A compact array of flexible structures."""
    return CompactArray(*fields, ("tags", TaggedFields))


def build_from_fields(self: Any, request_struct_class: type[RequestStruct]) -> Any:
    """``build`` of a request sent at one version only (the broker must support it): the
    fields given to its constructor (``self.fields``), in schema order, then no tagged field."""
    return request_struct_class(*self.fields, NO_TAGS)


#: ``ClientSoftwareName`` must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`` (KIP-511).
CLIENT_SOFTWARE_NAME = "dedupe-worker-aiokafka"
#: Tagged fields of ApiVersionsResponse v3+.
TAG_FINALIZED_FEATURES_EPOCH = 1
TAG_FINALIZED_FEATURES = 2
FINALIZED_FEATURES = array(
    ("name", STRING), ("max_version_level", Int16), ("min_version_level", Int16)
)


class ApiVersionsResponse_v3(Response):  # type: ignore[misc]
    API_KEY = 18
    API_VERSION = 3
    SCHEMA = struct(
        ("error_code", Int16),
        ("api_versions", array(("api_key", Int16), ("min_version", Int16), ("max_version", Int16))),
        ("throttle_time_ms", Int32),
    )


class ApiVersionsResponse_v4(Response):  # type: ignore[misc]
    API_KEY = 18
    API_VERSION = 4
    SCHEMA = ApiVersionsResponse_v3.SCHEMA


class ApiVersionsRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 18
    API_VERSION = 3
    RESPONSE_TYPE = ApiVersionsResponse_v3
    SCHEMA = struct(("client_software_name", STRING), ("client_software_version", STRING))

    def parse_response_header(self, read_buffer: Any) -> Any:
        # ApiVersionsResponse always has the v0 header (Kafka's ApiMessageTypeGenerator).
        return ResponseHeader_v0.decode(read_buffer)


class ApiVersionsRequest_v4(ApiVersionsRequest_v3):
    API_VERSION = 4
    RESPONSE_TYPE = ApiVersionsResponse_v4


ApiVersionsStruct: TypeAlias = ApiVersionRequest_v0 | ApiVersionsRequest_v3 | ApiVersionsRequest_v4


class ApiVersionsWithFeatures(Request[ApiVersionsStruct]):  # type: ignore[misc]
    """ApiVersions at the newest version both sides know (v0 when the broker has no v3: it
    then has no finalized features either)."""

    API_KEY = 18
    ALLOW_UNKNOWN_API_VERSION = True

    def build(self, request_struct_class: type[ApiVersionsStruct]) -> ApiVersionsStruct:
        if request_struct_class is ApiVersionRequest_v0:
            return ApiVersionRequest_v0()
        return request_struct_class(CLIENT_SOFTWARE_NAME, aiokafka_version, NO_TAGS)


PRODUCER_ID_AND_EPOCH = (("producer_id", Int64), ("producer_epoch", Int16))


class InitProducerIdResponse_v5(Response):  # type: ignore[misc]
    API_KEY = 22
    API_VERSION = 5
    SCHEMA = struct(("throttle_time_ms", Int32), ("error_code", Int16), *PRODUCER_ID_AND_EPOCH)


class InitProducerIdRequest_v5(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 22
    API_VERSION = 5
    RESPONSE_TYPE = InitProducerIdResponse_v5
    SCHEMA = struct(
        ("transactional_id", STRING), ("transaction_timeout_ms", Int32), *PRODUCER_ID_AND_EPOCH
    )


class InitProducerIdV5(Request[InitProducerIdRequest_v5]):  # type: ignore[misc]
    """A new producer session: producer id and epoch -1 (fence whoever had the id)."""

    API_KEY = 22
    build = build_from_fields

    def __init__(self, transactional_id: str, transaction_timeout_ms: int) -> None:
        self.fields = (transactional_id, transaction_timeout_ms, -1, -1)


class EndTxnResponse_v5(Response):  # type: ignore[misc]
    API_KEY = 26
    API_VERSION = 5
    SCHEMA = InitProducerIdResponse_v5.SCHEMA  # the producer id and epoch to use next


class EndTxnRequest_v5(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 26
    API_VERSION = 5
    RESPONSE_TYPE = EndTxnResponse_v5
    SCHEMA = struct(("transactional_id", STRING), *PRODUCER_ID_AND_EPOCH, ("committed", Boolean))


class EndTxnV5(Request[EndTxnRequest_v5]):  # type: ignore[misc]
    API_KEY = 26
    build = build_from_fields

    def __init__(self, transactional_id: str, producer_id: int, epoch: int, commit: int) -> None:
        self.fields = (transactional_id, producer_id, epoch, bool(commit))


class TxnOffsetCommitResponse_v5(Response):  # type: ignore[misc]
    API_KEY = 28
    API_VERSION = 5
    SCHEMA = struct(
        ("throttle_time_ms", Int32),
        (
            "topics",
            array(
                ("name", STRING),
                ("partitions", array(("partition_index", Int32), ("error_code", Int16))),
            ),
        ),
    )


class TxnOffsetCommitRequest_v5(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 28
    API_VERSION = 5
    RESPONSE_TYPE = TxnOffsetCommitResponse_v5
    SCHEMA = struct(
        ("transactional_id", STRING),
        ("group_id", STRING),
        *PRODUCER_ID_AND_EPOCH,
        ("generation_id", Int32),
        ("member_id", STRING),
        ("group_instance_id", STRING),
        (
            "topics",
            array(
                ("name", STRING),
                (
                    "partitions",
                    array(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", STRING),
                    ),
                ),
            ),
        ),
    )


class TxnOffsetCommitV5(Request[TxnOffsetCommitRequest_v5]):  # type: ignore[misc]
    """Offsets of a group in the transaction. Without the group's generation and member id
    (-1, ""; aiokafka's producer does not have them) the coordinator checks no membership,
    as for the versions before KIP-447."""

    API_KEY = 28
    build = build_from_fields

    def __init__(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, tuple[int, str | None]],
    ) -> None:
        topics: dict[str, list[tuple[Any, ...]]] = {}
        for tp, (offset, metadata) in sorted(offsets.items()):
            topics.setdefault(tp.topic, []).append((tp.partition, offset, -1, metadata, NO_TAGS))
        listed = [(topic, parts, NO_TAGS) for topic, parts in topics.items()]
        ids = (transactional_id, group_id, producer_id, producer_epoch)
        self.fields = (*ids, -1, "", None, listed)  # generation, member id, group instance id


class ProduceResponse_v12(Response):  # type: ignore[misc]
    API_KEY = 0
    API_VERSION = 12
    SCHEMA = struct(
        (
            "responses",
            array(
                ("name", STRING),
                (
                    "partition_responses",
                    array(  # its tag 0: the current leader (KIP-951)
                        ("index", Int32),
                        ("error_code", Int16),
                        ("base_offset", Int64),
                        ("log_append_time_ms", Int64),
                        ("log_start_offset", Int64),
                        ("record_errors", array(("batch_index", Int32), ("message", STRING))),
                        ("error_message", STRING),
                    ),
                ),
            ),
        ),
        ("throttle_time_ms", Int32),
    )  # its tag 0: the new leaders' endpoints (KIP-951)


class ProduceRequest_v12(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 0
    API_VERSION = 12
    RESPONSE_TYPE = ProduceResponse_v12
    SCHEMA = struct(
        ("transactional_id", STRING),
        ("acks", Int16),
        ("timeout_ms", Int32),
        (
            "topic_data",
            array(
                ("name", STRING),
                ("partition_data", array(("index", Int32), ("records", CompactBytes))),
            ),
        ),
    )


class ProduceV12(Request[ProduceRequest_v12]):  # type: ignore[misc]
    """Record batches of a transaction; on a v2 cluster their partitions join it."""

    API_KEY = 0
    build = build_from_fields

    def __init__(
        self,
        transactional_id: str,
        required_acks: int,
        timeout_ms: int,
        topics: dict[str, list[tuple[int, bytes]]],
    ) -> None:
        self.required_acks = required_acks
        listed = [
            (topic, [(p, bytes(records), NO_TAGS) for p, records in parts], NO_TAGS)
            for topic, parts in topics.items()
        ]
        self.fields = (transactional_id, required_acks, timeout_ms, listed)


def partitions_by_topic(tps: list[TopicPartition]) -> list[tuple[str, list[int], dict[int, bytes]]]:
    """``tps`` as a request's compact array of (topic, partition indexes, no tagged field)."""
    topics: dict[str, list[int]] = {}
    for tp in sorted(tps):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [(topic, parts, NO_TAGS) for topic, parts in topics.items()]


class DescribeProducersResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 61
    API_VERSION = 0
    SCHEMA = struct(
        ("throttle_time_ms", Int32),
        (
            "topics",
            array(
                ("name", STRING),
                (
                    "partitions",
                    array(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("error_message", STRING),
                        (
                            "active_producers",
                            array(
                                ("producer_id", Int64),
                                ("producer_epoch", Int32),
                                ("last_sequence", Int32),
                                ("last_timestamp", Int64),
                                ("coordinator_epoch", Int32),
                                ("current_txn_start_offset", Int64),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


class DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 61
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = struct(("topics", array(("name", STRING), ("partition_indexes", CompactArray(Int32)))))


class DescribeProducers(Request[DescribeProducersRequest_v0]):  # type: ignore[misc]
    """The producers a partition leader holds state for, with each one's open transaction
    (KIP-664, what ``kafka-transactions.sh describe-producers`` asks). Needs Read on the topic."""

    API_KEY = 61
    build = build_from_fields

    def __init__(self, tps: list[TopicPartition]) -> None:
        self.fields = (partitions_by_topic(tps),)


class WriteTxnMarkersResponse_v1(Response):  # type: ignore[misc]
    API_KEY = 27
    API_VERSION = 1
    SCHEMA = struct(
        (
            "markers",
            array(
                ("producer_id", Int64),
                (
                    "topics",
                    array(
                        ("name", STRING),
                        ("partitions", array(("partition_index", Int32), ("error_code", Int16))),
                    ),
                ),
            ),
        ),
    )


class WriteTxnMarkersRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # header v2, response header v1
    API_KEY = 27
    API_VERSION = 1
    RESPONSE_TYPE = WriteTxnMarkersResponse_v1
    SCHEMA = struct(
        (
            "markers",
            array(
                *PRODUCER_ID_AND_EPOCH,
                ("transaction_result", Boolean),
                ("topics", array(("name", STRING), ("partition_indexes", CompactArray(Int32)))),
                ("coordinator_epoch", Int32),
            ),
        ),
    )


class WriteTxnMarkers(Request[WriteTxnMarkersRequest_v1]):  # type: ignore[misc]
    """A transaction marker for one producer on partitions of the broker it is sent to: what a
    transaction coordinator writes at the end of a transaction, and what ``kafka-transactions.sh
    abort`` (``Admin.abortTransaction``) writes for a transaction no coordinator will end.
    Needs Alter (or ClusterAction) on the cluster. Version 1 carries no transaction version: the
    leader checks the marker's epoch as for the old protocol (at least the producer's)."""

    API_KEY = 27
    build = build_from_fields

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tps: list[TopicPartition],
    ) -> None:
        listed = partitions_by_topic(tps)
        marker = (producer_id, producer_epoch, commit, listed, coordinator_epoch, NO_TAGS)
        self.fields = ([marker],)
