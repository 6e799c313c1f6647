"""Each component refused on the secured broker: with another component's credentials, with a
missing ACL, with a wrong password, with a CA that did not sign the broker's certificate. Each
one stops at start-up, within seconds, with a message that says why (not a hang, not a stall)
and never quotes the password."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from scripts import kafka_acls
from tests.ingest.support import WRITE_KEY, IngestProcess, json_headers
from tests.security.conftest import SecureBroker, worker_as
from tests.security.test_ingest import create_input
from tests.support import Names
from tests.workers import Worker

#: A refusal must come at start-up, not after a timeout.
PROMPT = 30.0


def refused(worker: Worker) -> str:
    """Wait for ``worker`` to stop by itself; its log. Fails when it runs on."""
    assert worker.proc is not None
    started = time.monotonic()
    code = worker.proc.wait(PROMPT + 30)
    took = time.monotonic() - started
    log = worker.log_text()
    print(f"\nrefused (exit {code}) after {took:.1f}s: " + _error_line(log))
    assert code != 0 and took < PROMPT, log[-3000:]
    return log


def _error_line(log: str) -> str:
    return next((line for line in log.splitlines() if "[^Worker]: Error:" in line), "?")


def without(acls: list[kafka_acls.Acl], resource: str, operation: str, name: str) -> list:
    """``acls`` with ``operation`` on ``name`` taken away (the other operations stay)."""
    out = []
    for acl in acls:
        if acl.resource == resource and operation in acl.operations and name in acl.names:
            rest = tuple(n for n in acl.names if n != name)
            if rest:
                out.append(dataclasses.replace(acl, names=rest))
            others = tuple(op for op in acl.operations if op != operation)
            if others:
                out.append(dataclasses.replace(acl, operations=others, names=(name,)))
        else:
            out.append(acl)
    return out


def test_worker_with_the_ingest_services_credentials_is_refused(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    secure.grant(names)
    worker = worker_as(secure, names, "dedupe-ingest")
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "refusing to start: Kafka denies User:dedupe-ingest what this worker needs" in log
    assert f"Read on group '{names.app_id}' (DEDUPE_APP_ID)" in log
    assert secure.password_of("dedupe-ingest") not in log


def test_worker_missing_acls_is_refused_with_each_one_named(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    acls = kafka_acls.all_acls(secure.admin(names))
    acls = without(acls, "topic", "Write", names.output_topic)
    acls = without(acls, "topic", "Read", names.input_topic)
    secure.apply(acls)
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "Kafka denies User:dedupe-worker what this worker needs:" in log
    assert f"Write on topic '{names.output_topic}'" in log
    assert f"Read on topic '{names.input_topic}'" in log
    assert "python -m scripts.kafka_acls" in log


def test_worker_without_describe_configs_is_refused_naming_each_topic(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    """The start-up check of replication and configs (app/admin/topic_safety.py) reads each topic's
    configs: without DescribeConfigs the worker says so instead of running unchecked."""
    acls = kafka_acls.all_acls(secure.admin(names))
    secure.apply([a for a in acls if a.operations != ("DescribeConfigs",)])
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "Kafka denies User:dedupe-worker what this worker needs:" in log
    for topic in names.worker_topics:
        assert f"DescribeConfigs on topic {topic!r}" in log, topic


def test_worker_without_its_transactional_ids_is_refused(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    acls = kafka_acls.all_acls(secure.admin(names))
    secure.apply([a for a in acls if a.resource != "transactional-id"])
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    log = refused(worker)
    expected = f"Write on transactional ids starting with {names.app_id}-{names.input_topic}-"
    assert expected in log


def test_wrong_password_fails_fast_with_the_reason(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    secure.grant(names)
    wrong = "not-the-password-7Hq"
    worker = worker_as(
        secure, names, "dedupe-worker", KAFKA_SASL_PASSWORD_FILE="", KAFKA_SASL_PASSWORD=wrong
    )
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "the broker refused the credentials of User:dedupe-worker" in log
    assert "SaslAuthenticationFailed" in log and "invalid credentials" in log
    assert wrong not in log


def test_untrusted_broker_certificate_fails_fast_with_the_reason(
    secure: SecureBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=another CA", "-keyout", str(tmp_path / "k"), "-out", str(other_ca)),
        ],
        check=True,
        capture_output=True,
    )
    worker = worker_as(secure, names, "dedupe-worker", KAFKA_SSL_CAFILE=str(other_ca))
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert f"the broker's TLS certificate is not trusted ({other_ca})" in log
    assert "self-signed certificate in certificate chain" in log


def test_plaintext_client_on_the_tls_port_fails_fast_with_the_reason(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    plaintext = {
        "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT",
        "KAFKA_SASL_USERNAME": "",
        "KAFKA_SASL_PASSWORD_FILE": "",
        "KAFKA_SSL_CAFILE": "",
    }
    worker = worker_as(secure, names, "dedupe-worker", **plaintext)
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "a PLAINTEXT client on a TLS port?" in log


@pytest.fixture
def ingest_log(tmp_path: Path) -> Path:
    return tmp_path / "ingest.log"


def test_ingest_with_the_spark_jobs_credentials_is_refused(
    secure: SecureBroker, names: Names, ingest_log: Path
) -> None:
    secure.grant(names)
    service = IngestProcess(
        secure.broker, names.input_topic, ingest_log, extra_env=secure.env_of("dedupe-spark")
    )
    service.start()
    assert service.proc is not None
    started = time.monotonic()
    code = service.proc.wait(PROMPT + 30)
    took = time.monotonic() - started
    log = service.log_text()
    print(f"\ningest refused (exit {code}) after {took:.1f}s: {log.strip().splitlines()[-1]}")
    assert code != 0 and took < PROMPT, log
    assert (
        f"Kafka denies User:dedupe-spark access to topic {names.input_topic!r}: the ingest "
        "service needs Write (and Describe) on it"
    ) in log


def test_ingest_that_may_describe_but_not_write_answers_503_naming_the_denial(
    secure: SecureBroker, names: Names, ingest_log: Path
) -> None:
    """Not caught at start-up (Kafka cannot check Write without a write): the worker's user
    may describe the input topic, not write it. Each request fails at once with the reason."""
    secure.grant(names)
    asyncio.run(create_input(secure, names))
    service = IngestProcess(
        secure.broker, names.input_topic, ingest_log, extra_env=secure.env_of("dedupe-worker")
    )
    service.start()
    try:
        service.wait_ready()
        req = urllib.request.Request(
            service.url + "/v1/track",
            data=json.dumps({"userId": "u1", "event": "Signed Up", "messageId": "m-1"}).encode(),
            headers=json_headers(WRITE_KEY),
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(req, timeout=30)
        body = json.loads(answer.value.read())
    finally:
        service.stop()
    print(f"\ningest as dedupe-worker: {answer.value.code} {body['error']}")
    assert answer.value.code == 503 and body["code"] == "kafka_unavailable"
    assert f"TopicAuthorizationFailedError: {names.input_topic}" in body["error"]


def test_client_without_sasl_on_the_sasl_port_is_told_the_broker_may_expect_sasl(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    """TLS alone succeeds on a SASL_SSL listener; the broker hangs up on the first request that
    is not part of the SASL handshake. The worker says so instead of "start a broker"."""
    secure.grant(names)
    ssl_only = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SASL_USERNAME": "",
        "KAFKA_SASL_PASSWORD_FILE": "",
    }
    worker = worker_as(secure, names, "dedupe-worker", **ssl_only)
    workers.append(worker)
    worker.start()
    log = refused(worker)
    assert "closed the connection on the first request from this SSL client" in log
    assert (
        "it may expect SASL: set KAFKA_SECURITY_PROTOCOL=SASL_SSL with KAFKA_SASL_MECHANISM" in log
    )
    assert "works now; the broker may have been starting" not in log
    assert "make kafka-up" not in log


def test_ingest_without_sasl_on_the_sasl_port_is_told_the_broker_may_expect_sasl(
    secure: SecureBroker, names: Names, ingest_log: Path
) -> None:
    ssl_only = {
        **secure.env_of("dedupe-ingest"),
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SASL_USERNAME": "",
        "KAFKA_SASL_PASSWORD_FILE": "",
    }
    service = IngestProcess(secure.broker, names.input_topic, ingest_log, extra_env=ssl_only)
    service.start()
    assert service.proc is not None
    started = time.monotonic()
    code = service.proc.wait(PROMPT + 30)
    took = time.monotonic() - started
    log = service.log_text()
    print(f"\ningest without SASL (exit {code}) after {took:.1f}s: {log.strip().splitlines()[-1]}")
    assert code != 0, log
    assert "it may expect SASL: set KAFKA_SECURITY_PROTOCOL=SASL_SSL" in log
