"""Which Kafka transaction protocol the tasks' producers speak, chosen once at start-up.

Kafka 4.x clusters finalize the feature ``transaction.version`` (KIP-890; 2 by default on a new
cluster). At 2 the Java client runs transactions the "v2" way: InitProducerId, Produce and
EndTxn at their newest versions, the broker adding partitions and offsets to the transaction
itself and bumping the producer epoch at every EndTxn. Below 2 (or when the broker reports no
such feature) it keeps the old flow, which brokers of every version still accept. The Java
client reads the finalized features from ApiVersions v3+ (``ApiVersions.java``, the highest
``FinalizedFeaturesEpoch`` of the nodes it spoke to; ``TransactionManager
.maybeUpdateTransactionV2Enabled``); this module asks every broker once the same way.

aiokafka parses ApiVersions only up to v2 (no features): v3/v4 are in ``txn_messages.py``.

``DEDUPE_TRANSACTION_PROTOCOL`` (``auto``, ``v1``, ``v2``) picks the protocol: ``auto`` runs v2
(``txn_v2.py``) when the cluster finalized 2 and v1 (aiokafka's own flow) otherwise; ``v2`` on a
cluster that did not finalize it is refused at start-up. Unlike the Java client, which looks
again at every ``beginTransaction``, the choice holds until the worker restarts: a cluster that
finalizes 2 later keeps v1 workers running (brokers accept the old flow), and one whose
``transaction.version`` is downgraded below 2 needs its v2 workers restarted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from io import BytesIO
from typing import TYPE_CHECKING, Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.types import Int64

from app.eos.txn_messages import (
    FINALIZED_FEATURES,
    TAG_FINALIZED_FEATURES,
    TAG_FINALIZED_FEATURES_EPOCH,
    ApiVersionsWithFeatures,
)

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)

#: The feature whose finalized level decides the transaction protocol (``TransactionVersion``).
TRANSACTION_VERSION = "transaction.version"
#: ``DEDUPE_TRANSACTION_PROTOCOL``'s values.
PROTOCOL_SETTINGS = ("auto", "v1", "v2")


@dataclass(frozen=True)
class FinalizedFeatures:
    """A broker's view of the cluster's finalized features (empty with epoch -1: unknown)."""

    epoch: int = -1
    #: Feature name -> finalized max version level.
    levels: dict[str, int] = field(default_factory=dict)

    @property
    def transaction_version(self) -> int:
        """The finalized ``transaction.version``; 0 or absent count as 1 (the old flow)."""
        return max(self.levels.get(TRANSACTION_VERSION, 0), 1)


def finalized_features(response: Any) -> FinalizedFeatures:
    """The finalized features of an ApiVersions response (none below v3)."""
    error = for_code(response.error_code)
    if response.error_code:
        raise error(f"ApiVersions v{response.API_VERSION} failed")
    tags: dict[int, bytes] = getattr(response, "tags", None) or {}
    epoch = -1
    if TAG_FINALIZED_FEATURES_EPOCH in tags:
        epoch = Int64.decode(BytesIO(tags[TAG_FINALIZED_FEATURES_EPOCH]))
    levels: dict[str, int] = {}
    if TAG_FINALIZED_FEATURES in tags:
        for name, max_level, _min_level, _tags in (
            FINALIZED_FEATURES.decode(BytesIO(tags[TAG_FINALIZED_FEATURES])) or []
        ):
            levels[name] = max_level
    return FinalizedFeatures(epoch, levels)


async def cluster_features(settings: EosSettings) -> FinalizedFeatures:
    """The finalized features of the broker with the newest view of them (the highest epoch),
    as the Java client's ``ApiVersions`` keeps them: a broker may lag behind the controller
    for a moment after a feature update."""
    client = AIOKafkaClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.app_id}-features",
        **settings.kafka_client_kwargs(),
    )
    try:
        await client.bootstrap()
        newest = FinalizedFeatures()
        for broker in sorted(client.cluster.brokers(), key=lambda b: b.nodeId):
            features = finalized_features(
                await client.send(broker.nodeId, ApiVersionsWithFeatures())
            )
            if features.epoch > newest.epoch:
                newest = features
        return newest
    finally:
        await client.close()


class ProtocolRefused(RuntimeError):
    """``DEDUPE_TRANSACTION_PROTOCOL=v2`` on a cluster that did not finalize it."""


@dataclass(frozen=True)
class TransactionProtocol:
    """The protocol the tasks' producers run, and why (for the log and ``/stats``)."""

    #: "v1" or "v2".
    running: str
    #: ``DEDUPE_TRANSACTION_PROTOCOL``.
    setting: str
    #: The cluster's finalized ``transaction.version`` (0 or absent reported as 1).
    cluster_transaction_version: int

    def stats(self) -> dict[str, Any]:
        return {
            "protocol": self.running,
            "setting": self.setting,
            "cluster_transaction_version": self.cluster_transaction_version,
        }

    def describe(self) -> str:
        why = {
            "auto": "chosen from what the cluster finalized",
            "v1": "forced",
            "v2": "forced",
        }[self.setting]
        return (
            f"transactions run protocol {self.running} (DEDUPE_TRANSACTION_PROTOCOL="
            f"{self.setting}: {why}); the cluster finalized "
            f"{TRANSACTION_VERSION}={self.cluster_transaction_version}"
        )


def choose(setting: str, cluster_transaction_version: int) -> TransactionProtocol:
    """The protocol to run; :class:`ProtocolRefused` when ``setting`` cannot be honoured."""
    if setting not in PROTOCOL_SETTINGS:
        raise ProtocolRefused(f"DEDUPE_TRANSACTION_PROTOCOL={setting!r}: use auto, v1 or v2")
    if setting == "v2":
        if cluster_transaction_version < 2:
            raise ProtocolRefused(
                "refusing to start: DEDUPE_TRANSACTION_PROTOCOL=v2, but the cluster finalized "
                f"{TRANSACTION_VERSION}={cluster_transaction_version}; upgrade the feature "
                "(kafka-features upgrade --feature transaction.version=2) or use auto or v1"
            )
        return TransactionProtocol("v2", setting, cluster_transaction_version)
    if setting == "auto" and cluster_transaction_version >= 2:
        return TransactionProtocol("v2", setting, cluster_transaction_version)
    return TransactionProtocol("v1", setting, cluster_transaction_version)


async def detect(settings: EosSettings) -> TransactionProtocol:
    """Ask the cluster, choose as ``DEDUPE_TRANSACTION_PROTOCOL`` says and log the choice."""
    features = await cluster_features(settings)
    protocol = choose(settings.transaction_protocol, features.transaction_version)
    log.info("%s", protocol.describe())
    return protocol
