"""Start-up probe: may this worker's Kafka principal do everything the worker will do?

On a secured cluster a missing ACL does not always fail loudly: a topic the principal may not
describe looks like a topic with no partitions, a denied fetch or transactional write shows up
only when the first record flows. So before it joins its group the worker asks the broker, with
its own credentials, for each thing it needs, and refuses to start with every denial listed:

1. Describe on each of its topics (metadata) and Describe/Read on its group (an offset fetch);
2. Write on its transactional ids (InitProducerId of a probe id under the same prefix);
3. Write on each topic it writes (AddPartitionsToTxn of partition 0 of each, then an abort:
   nothing is written but abort markers, which every reader skips);
4. Read on each topic it reads (a fetch of partition 0 from its end: no record is read).

The message names the principal, each denied operation and resource, and where the ACLs are
(``python -m scripts.kafka_acls``, docs/security.md), in the wording the verifier and the Spark
job share (envsettings/kafka_access.py, with the fetch probe of step 4). Steps 2-4 run for
authenticated clients (SSL, SASL_SSL) only; step 1 always (it has no side effect).
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.structs import TopicPartition

from app.eos.producer import probe_transactional_writes
from app.settings import Settings
from envsettings.kafka_access import denied_message, unreadable
from envsettings.kafka_security import PLAINTEXT, TOPIC_AUTHORIZATION_FAILED


class AccessDenied(RuntimeError):
    """The broker denies this worker's principal something the worker needs."""


async def check_group(admin: AIOKafkaAdminClient, settings: Settings) -> None:
    """Step 1a: access to the group (an offset fetch); :class:`AccessDenied` if not."""
    try:
        await admin.list_consumer_group_offsets(settings.app_id)
    except GroupAuthorizationFailedError:
        denial = f"Read on group {settings.app_id!r} (DEDUPE_APP_ID)"
        raise AccessDenied(denied_message(settings, [denial])) from None


async def check_visible(admin: AIOKafkaAdminClient, settings: Settings, topics: list[str]) -> None:
    """Step 1b, once the topics exist (a metadata request for a missing topic could create it
    on a broker with auto-creation on): Describe on each; :class:`AccessDenied` if not."""
    denials = [
        f"Describe on topic {t['topic']!r}"
        for t in await admin.describe_topics(topics)
        if t["error_code"] == TOPIC_AUTHORIZATION_FAILED
    ]
    if denials:
        raise AccessDenied(denied_message(settings, denials))


async def check_read_write(settings: Settings, read: list[str], write: list[str]) -> None:
    """Steps 2-4, once the topics exist: :class:`AccessDenied` listing every denial. Only for
    an authenticated client (SSL, SASL_SSL): on PLAINTEXT there is no principal to hold ACLs,
    and the probe's transactional id would be one more id in the broker's transaction list."""
    if settings.security_protocol == PLAINTEXT:
        return
    denials: list[str] = []
    probe_id = f"{settings.app_id}-{settings.input_topic}-access-probe"
    try:
        unauthorized = await probe_transactional_writes(
            settings, probe_id, [TopicPartition(t, 0) for t in write]
        )
        denials += [f"Write on topic {t!r}" for t in sorted(unauthorized)]
    except TransactionalIdAuthorizationFailed:
        denials.append(
            f"Write on transactional ids starting with "
            f"{settings.app_id}-{settings.input_topic}- (prefixed)"
        )
    denials += [
        f"Read on topic {t!r}" for t in await unreadable(settings, settings.bootstrap_servers, read)
    ]
    if denials:
        raise AccessDenied(denied_message(settings, denials))
