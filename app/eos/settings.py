"""What the exactly-once layer reads of the worker's settings, declared here as a Protocol.

``app/eos`` depends on no module of the worker: the worker's ``app.settings.Settings`` satisfies
this Protocol (mypy checks it where the factory hands its settings in), and a test may hand in
anything that does.
"""

from __future__ import annotations

from typing import Any, Protocol


class EosSettings(Protocol):
    """The settings the transaction manager, its producers, the consumer and the cluster checks
    read (their meaning: docs/settings.md; durations in seconds)."""

    @property
    def app_id(self) -> str: ...

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def changelog_compression(self) -> str: ...

    @property
    def commit_interval(self) -> float: ...

    @property
    def commit_timeout(self) -> float: ...

    @property
    def compression(self) -> str: ...

    @property
    def dlq_max_message_bytes(self) -> int: ...

    @property
    def dlq_topic(self) -> str: ...

    @property
    def fetch_max_wait(self) -> float: ...

    @property
    def input_topic(self) -> str: ...

    @property
    def output_topic(self) -> str: ...

    @property
    def native_records(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    @property
    def repartition_topic(self) -> str: ...

    @property
    def stall_timeout(self) -> float: ...

    @property
    def transaction_protocol(self) -> str: ...

    @property
    def transaction_timeout(self) -> float: ...

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """The connection and security options of every Kafka client."""
        ...
