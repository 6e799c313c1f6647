"""Where accepted events go: the input topic, through one shared idempotent Kafka producer.

``KafkaSink.send_all`` returns only after Kafka acknowledged every record (``acks=all``) and
raises otherwise; the service answers 200 only after it returned. Records are keyed by the
messageId's UTF-8 bytes and sent to the partition Kafka's default partitioner gives that key
(murmur2, as Java's), computed for a whole request at once by the worker's own placement rule
(``app.rules.partitions_for``, vectorised; aiokafka's partitioner is pure Python and runs per
record, a large share of a batch's CPU in ``make bench-ingest``'s profile): the worker never
has to re-key them.

The producer is idempotent, so its own retries inside one request never duplicate a record. A
request that fails part way (some records written, then an error or timeout) is answered 503;
the client's retry writes the same messageIds again and the dedup worker drops the copies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, KafkaTimeoutError

from app import rules
from envsettings.kafka_connection import connection_problem
from envsettings.kafka_security import PLAINTEXT, TOPIC_AUTHORIZATION_FAILED
from ingest.events import Prepared
from ingest.settings import IngestSettings

log = logging.getLogger(__name__)

#: Kafka headers of every produced record.
HEADERS = [("content-type", b"application/json")]
#: The header naming the record's source (its write key's source name), read by the worker's
#: per-source policies (app/strategy.py).
SOURCE_HEADER = "dedupe.source"


def headers_of(record: Prepared) -> list[tuple[str, bytes]]:
    if record.source is None:
        return HEADERS
    return [*HEADERS, (SOURCE_HEADER, record.source)]


class EventSink(Protocol):
    """Sends records and returns once every one is acknowledged; raises ``KafkaError`` (or
    ``TimeoutError``) otherwise, possibly after some of them were written."""

    async def send_all(self, records: Sequence[Prepared], timeout: float) -> None: ...

    async def unready_reason(self, timeout: float) -> str | None:
        """None when events can be sent now; otherwise why not (``GET /ready`` answers 503)."""
        ...


class StartupError(RuntimeError):
    """Kafka or the input topic could not be reached at start-up."""


def _retrieve(fut: asyncio.Future[object]) -> None:
    """Mark a delivery future's error as seen (it is reported through the first error)."""
    if not fut.cancelled():
        fut.exception()


class KafkaSink:
    """The shared producer of one ingest process. ``start`` waits for the input topic."""

    def __init__(self, settings: IngestSettings) -> None:
        self.settings = settings
        self.topic = settings.input_topic
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        """Connect, wait until the input topic exists (the first worker creates it, with the
        partition count the worker expects), then start the producer."""
        s = self.settings
        deadline = time.monotonic() + s.startup_timeout
        await self._wait_for_topic(deadline)
        producer = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            **s.kafka_client_kwargs(),
            client_id="dedupe-ingest",
            acks="all",
            enable_idempotence=True,
            linger_ms=int(s.linger * 1000),
            request_timeout_ms=max(int(s.ack_timeout * 1000), 1000),
            max_batch_size=512 * 1024,
            max_request_size=4 * 1024 * 1024,
        )
        try:
            await producer.start()
            partitions = await producer.partitions_for(self.topic)
        except KafkaError as exc:
            await producer.stop()
            raise StartupError(f"cannot produce to {self.topic!r}: {exc!r}") from None
        self._producer = producer
        log.info(
            "producing to %r (%d partitions) on %s: acks=all, idempotent",
            self.topic,
            len(partitions),
            s.bootstrap_servers,
        )

    async def _wait_for_topic(self, deadline: float) -> None:
        """Poll the topic list (which, unlike a producer's metadata request, never creates
        the topic on a broker with auto-creation on) until the input topic is listed."""
        s = self.settings
        admin = AIOKafkaAdminClient(
            bootstrap_servers=s.bootstrap_servers,
            client_id="dedupe-ingest-admin",
            **s.kafka_client_kwargs(),
        )
        try:
            await admin.start()
        except KafkaError:
            await admin.close()
            why = await connection_problem(s, s.bootstrap_servers)
            raise StartupError(f"cannot reach Kafka at {s.bootstrap_servers}: {why}") from None
        try:
            warned = False
            while self.topic not in await admin.list_topics():
                await self._refuse_if_denied(admin)
                if time.monotonic() > deadline:
                    raise StartupError(
                        f"topic {self.topic!r} does not exist on {s.bootstrap_servers} after "
                        f"{s.startup_timeout:g}s; start a worker first (it creates its topics) "
                        "or check DEDUPE_INPUT_TOPIC"
                    )
                if not warned:
                    log.warning("waiting for topic %r to exist (start a worker)", self.topic)
                    warned = True
                await asyncio.sleep(0.5)
        finally:
            await admin.close()

    async def _refuse_if_denied(self, admin: AIOKafkaAdminClient) -> None:
        """On a secured cluster, a topic the principal may not describe is never listed: say
        so at once instead of waiting for it. (Not asked on PLAINTEXT: a metadata request for
        a missing topic creates it on a broker with auto-creation on.)"""
        s = self.settings
        if s.security_protocol == PLAINTEXT:
            return
        [topic] = await admin.describe_topics([self.topic])
        if topic["error_code"] == TOPIC_AUTHORIZATION_FAILED:
            raise StartupError(
                f"Kafka denies {s.kafka_principal} access to topic {self.topic!r}: the ingest "
                "service needs Write (and Describe) on it (python -m scripts.kafka_acls; "
                "docs/security.md), or check KAFKA_SASL_USERNAME: each component has its own user"
            )

    async def unready_reason(self, timeout: float) -> str | None:
        """Ask Kafka, through the producer's own client, for the input topic's metadata.

        Ready when a broker answered within ``timeout`` seconds and every partition of the
        topic has a leader. The request is the producer's metadata refresh, which concurrent
        checks share (a load balancer's probes add at most one request in flight). A stopped
        broker refuses the connection, so the refresh fails at once; a frozen one never
        answers, so the timeout decides.
        """
        producer = self._producer
        if producer is None:
            return "the producer is not started"
        client = producer.client
        where = self.settings.bootstrap_servers
        try:
            async with asyncio.timeout(timeout):
                updated = await client.force_metadata_update()
        except TimeoutError:
            return f"Kafka at {where} did not answer a metadata request within {timeout:g}s"
        if not updated:
            return f"no broker of {where} answered a metadata request"
        partitions = client.cluster.partitions_for_topic(self.topic)
        if not partitions:
            return f"topic {self.topic!r} is not in the metadata of {where}"
        available = client.cluster.available_partitions_for_topic(self.topic)
        leaderless = sorted(set(partitions) - set(available))
        if leaderless:
            return f"partitions {leaderless} of {self.topic!r} have no leader on {where}"
        return None

    async def stop(self) -> None:
        """Flush what is pending and close the producer."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()
            log.info("producer flushed and closed")

    async def send_all(self, records: Sequence[Prepared], timeout: float) -> None:
        producer = self._producer
        if producer is None:
            raise KafkaError("the producer is not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        futures: list[asyncio.Future[object]] = []
        try:
            async with asyncio.timeout_at(deadline):  # send() waits when its buffer is full
                # The count the producer's metadata holds now: a topic grown since start-up
                # places new records by its new count, as the default partitioner would.
                count = len(producer.client.cluster.partitions_for_topic(self.topic) or ())
                homes = rules.partitions_for([r.key for r in records], count) if count else None
                for i, record in enumerate(records):
                    fut = await producer.send(
                        self.topic,
                        record.value,
                        key=record.key,
                        headers=headers_of(record),
                        partition=None if homes is None else homes[i],
                    )
                    fut.add_done_callback(_retrieve)
                    futures.append(fut)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"only {len(futures)} of {len(records)} events could be queued within {timeout:g}s"
            ) from None
        if not futures:
            return
        _, pending = await asyncio.wait(futures, timeout=max(deadline - loop.time(), 0.0))
        if pending:
            raise KafkaTimeoutError(
                f"{len(pending)} of {len(records)} events not acknowledged within {timeout:g}s"
            )
        for fut in futures:
            exc = fut.exception()
            if exc is not None:
                raise exc
