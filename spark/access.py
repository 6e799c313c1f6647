"""Start-up check of the Spark job's Kafka access: may its principal read the clean topic?

Without it a missing ACL shows up only once the first micro-batch runs, tens of seconds later,
as ``TopicAuthorizationException: Topic authorization failed.`` naming neither the user nor the
topic. So before the Spark session starts the job asks the broker, with its own credentials,
for what its Kafka source will do (as the worker's app/admin/access.py and the ingest service do):

1. reach the broker (else: why not, envsettings/kafka_connection.py);
2. Describe on the clean topic (metadata);
3. Read on it (a fetch of partition 0 from its end: no record is read), for authenticated
   clients (SSL, SASL_SSL) only: on PLAINTEXT there is no principal to hold ACLs.

The job needs no group: Spark's Kafka source assigns partitions itself and keeps its offsets in
its checkpoint (scripts/kafka_acls.py ``spark_acls``).
"""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from envsettings.kafka_access import denied_message, unreadable
from envsettings.kafka_connection import connection_problem
from envsettings.kafka_security import PLAINTEXT, TOPIC_AUTHORIZATION_FAILED
from spark.settings import SparkSettings

COMPONENT = "Spark job"


async def access_problem(settings: SparkSettings) -> str | None:
    """Why the job's principal cannot read the clean topic, or None when it can (or when the
    topic does not exist yet: Spark's source reports that itself)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        client_id="dedupe-spark-access",
        **settings.kafka_client_kwargs(),
    )
    try:
        await admin.start()
    except KafkaError:
        await admin.close()
        why = await connection_problem(settings, settings.bootstrap_servers)
        return f"cannot reach Kafka at {settings.bootstrap_servers}: {why}"
    try:
        # The same metadata request Spark's Kafka consumer sends for its subscription a moment
        # later, so this probe creates no topic the job would not (allow.auto.create.topics).
        described = await admin.describe_topics([settings.topic])
    finally:
        await admin.close()
    codes = {t["topic"]: t["error_code"] for t in described}
    if codes.get(settings.topic) == TOPIC_AUTHORIZATION_FAILED:
        denial = f"Read and Describe on topic {settings.topic!r} (DEDUPE_OUTPUT_TOPIC)"
        return denied_message(settings, [denial], COMPONENT)
    if codes.get(settings.topic) != 0 or settings.security_protocol == PLAINTEXT:
        return None
    if await unreadable(settings, settings.bootstrap_servers, [settings.topic]):
        denial = f"Read on topic {settings.topic!r} (DEDUPE_OUTPUT_TOPIC)"
        return denied_message(settings, [denial], COMPONENT)
    return None


def check_access(settings: SparkSettings) -> str | None:
    """:func:`access_problem`, from the job's synchronous start-up."""
    return asyncio.run(access_problem(settings))
