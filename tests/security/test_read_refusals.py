"""The pipeline's readers refused on the secured broker: the verifier (``make verify``) and the
Spark job, as a user without access to the clean topic, stop at once, naming the user, the
topic and the missing ACLs, as the worker does (envsettings/kafka_access.py
``denied_message``), instead of waiting for the topic to appear and reporting it missing (the
verifier) or failing at the first micro-batch with neither named (the Spark job)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from scripts import kafka_acls
from spark.access import access_problem
from spark.settings import SparkSettings
from tests.security.conftest import SecureBroker
from tests.security.test_refusals import without
from tests.support import Names

#: A refusal must come at start-up, not after the reader's 30 s wait for a topic.
PROMPT = 15.0


async def create_clean(secure: SecureBroker, names: Names) -> None:
    """The clean topic, created as the super user (a worker would create it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=secure.broker.bootstrap, **secure.client("admin"))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(names.output_topic, 4, 1)])
    finally:
        await admin.close()


def verify_as(
    secure: SecureBroker, names: Names, user: str, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    """Run ``python -m scripts.verify`` as ``user`` (more settings: ``env``); its exit status,
    output and seconds."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")},
        **secure.env_of(user),
        "KAFKA_BOOTSTRAP_SERVERS": secure.broker.bootstrap,
        "DEDUPE_APP_ID": names.app_id,
        "DEDUPE_INPUT_TOPIC": names.input_topic,
        "DEDUPE_OUTPUT_TOPIC": names.output_topic,
        "DEDUPE_DLQ_TOPIC": names.dlq_topic,
        **(env or {}),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "scripts.verify", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=PROMPT + 60,
        check=False,
    )
    took = time.monotonic() - started
    print(f"\nverify as {user} (exit {done.returncode}) after {took:.1f}s:\n{done.stderr[-600:]}")
    return done.returncode, done.stdout + done.stderr, took


def test_verify_without_access_to_the_clean_topic_names_user_topic_and_acls(
    secure: SecureBroker, names: Names
) -> None:
    secure.grant(names)
    asyncio.run(create_clean(secure, names))
    code, out, took = verify_as(secure, names, "dedupe-ingest")
    assert code == 2, out
    assert "refusing to start: Kafka denies User:dedupe-ingest what this verifier needs" in out
    assert f"Read and Describe on topic {names.output_topic!r}" in out
    assert "python -m scripts.kafka_acls" in out
    assert "Traceback" not in out and "does not exist" not in out
    assert out.count("is not authorized") <= 1, out[-2000:]
    assert took < PROMPT, took


def test_verify_as_a_user_with_access_reads_the_clean_topic(
    secure: SecureBroker, names: Names
) -> None:
    """The same command as a user who may read it: the refusal above is about access only."""
    secure.grant(names)
    asyncio.run(create_clean(secure, names))
    code, out, _ = verify_as(secure, names, "admin")
    assert code == 0, out
    assert f"{names.output_topic}: total=0 distinct=0 duplicates=0" in out


def test_verify_without_sasl_on_the_sasl_port_is_told_the_broker_may_expect_sasl(
    secure: SecureBroker, names: Names
) -> None:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SASL_USERNAME": "",
        "KAFKA_SASL_PASSWORD_FILE": "",
    }
    code, out, took = verify_as(secure, names, "admin", env=env)
    assert code == 2, out
    assert "closed the connection on the first request from this SSL client" in out
    assert "it may expect SASL: set KAFKA_SECURITY_PROTOCOL=SASL_SSL" in out
    assert took < PROMPT, took


def spark_job_as(
    secure: SecureBroker, names: Names, user: str, lake: Path, **more: str
) -> tuple[int, str, float]:
    """Run ``python -m spark.job`` as ``user`` (more settings: ``more``); its exit status,
    output and seconds."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")},
        **secure.env_of(user),
        "KAFKA_BOOTSTRAP_SERVERS": secure.broker.bootstrap,
        "DEDUPE_OUTPUT_TOPIC": names.output_topic,
        "DEDUPE_LAKE_DIR": str(lake),
        **more,
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "spark.job"],
        env=env,
        capture_output=True,
        text=True,
        timeout=PROMPT + 120,
        check=False,
    )
    took = time.monotonic() - started
    print(
        f"\nspark job as {user} (exit {done.returncode}) after {took:.1f}s:\n{done.stderr[-600:]}"
    )
    return done.returncode, done.stdout + done.stderr, took


def test_spark_job_with_another_components_user_names_user_and_topic_at_start_up(
    secure: SecureBroker, names: Names, tmp_path: Path
) -> None:
    """dedupe-ingest may not even describe the clean topic: refused before the Spark session
    starts (it failed at the first micro-batch, naming neither)."""
    secure.grant(names)
    asyncio.run(create_clean(secure, names))
    code, out, took = spark_job_as(secure, names, "dedupe-ingest", tmp_path / "lake")
    assert code == 2, out
    assert "refusing to start: Kafka denies User:dedupe-ingest what this Spark job needs" in out
    assert f"Read and Describe on topic {names.output_topic!r} (DEDUPE_OUTPUT_TOPIC)" in out
    assert "python -m scripts.kafka_acls" in out
    assert "TopicAuthorizationException" not in out
    assert took < PROMPT, took


def test_spark_job_without_read_on_the_clean_topic_is_refused_at_start_up(
    secure: SecureBroker, names: Names, tmp_path: Path
) -> None:
    """The job's own user with Describe but not Read on the clean topic: metadata works, the
    fetch probe is what tells."""
    acls = kafka_acls.all_acls(secure.admin(names))
    secure.apply(without(acls, "topic", "Read", names.output_topic))
    asyncio.run(create_clean(secure, names))
    code, out, took = spark_job_as(secure, names, "dedupe-spark", tmp_path / "lake")
    assert code == 2, out
    assert "refusing to start: Kafka denies User:dedupe-spark what this Spark job needs" in out
    assert f"Read on topic {names.output_topic!r} (DEDUPE_OUTPUT_TOPIC)" in out
    assert "Read and Describe" not in out
    assert took < PROMPT, took


def test_spark_jobs_own_user_passes_the_start_up_check(secure: SecureBroker, names: Names) -> None:
    """The check refuses only what is denied: the job's own user with its ACLs passes."""
    secure.grant(names)
    asyncio.run(create_clean(secure, names))
    settings = SparkSettings.from_env(
        {
            **secure.env_of("dedupe-spark"),
            "KAFKA_BOOTSTRAP_SERVERS": secure.broker.bootstrap,
            "DEDUPE_OUTPUT_TOPIC": names.output_topic,
        }
    )
    assert asyncio.run(access_problem(settings)) is None


def test_spark_job_without_sasl_on_the_sasl_port_is_told_the_broker_may_expect_sasl(
    secure: SecureBroker, names: Names, tmp_path: Path
) -> None:
    code, out, took = spark_job_as(
        secure,
        names,
        "dedupe-spark",
        tmp_path / "lake",
        KAFKA_SECURITY_PROTOCOL="SSL",
        KAFKA_SASL_USERNAME="",
        KAFKA_SASL_PASSWORD_FILE="",
    )
    assert code == 2, out
    assert "closed the connection on the first request from this SSL client" in out
    assert "it may expect SASL: set KAFKA_SECURITY_PROTOCOL=SASL_SSL" in out
    assert took < PROMPT, took
