"""Why a tool that reads the pipeline's topics (the verifier) cannot, said the way the worker
says it: the principal, each denied operation and resource, and where the ACLs are.

Without this a denied topic looks like a topic with no partitions (a metadata answer lists it as
unauthorized, with no partitions) and a reader waits for it to appear, then reports it missing.
"""

from __future__ import annotations

import asyncio

from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from envsettings.kafka_access import denied_message
from envsettings.kafka_connection import connection_problem
from envsettings.kafka_security import KafkaSecuritySettings

#: What a reader's refusal is made of (anything else is not a refusal: a traceback says more).
REFUSALS = (TopicAuthorizationFailedError, GroupAuthorizationFailedError, KafkaConnectionError)


def refusal_message(
    settings: KafkaSecuritySettings,
    bootstrap: str,
    exc: KafkaError,
    component: str,
    group: str | None = None,
) -> str:
    """The message for ``exc`` (one of :data:`REFUSALS`) raised while ``component`` read."""
    if isinstance(exc, KafkaConnectionError):
        why = asyncio.run(connection_problem(settings, bootstrap))
        return f"cannot reach Kafka at {bootstrap}: {why}"
    if isinstance(exc, GroupAuthorizationFailedError):
        denial = f"Describe on group {group!r} (DEDUPE_APP_ID)"
        return denied_message(settings, [denial], component)
    topics = exc.args[0] if exc.args else "?"
    names = sorted(topics) if isinstance(topics, set | frozenset | list) else [topics]
    denials = [f"Read and Describe on topic {t!r}" for t in names]
    return denied_message(settings, denials, component)
