"""The Kafka security section shared by every service: what it passes to aiokafka, Faust and
Spark, what it refuses at start-up (every problem at once), and that the password stays out of
reprs and messages. The same settings against a real secured broker: tests/security."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from faust.auth import SASLCredentials

from app.settings import Settings, SettingsError
from envsettings.kafka_security import KafkaSecuritySettings
from ingest.settings import IngestSettings
from spark.settings import SparkSettings, SparkSettingsError

SECRET = 'pa"ss\\word-3f9c'


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway self-signed CA certificate (PEM)."""
    d = tmp_path_factory.mktemp("ca")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=test-ca", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem")),
        ],
        check=True,
        capture_output=True,
    )
    return d / "ca.pem"


def sasl_env(ca_file: Path, **extra: str) -> dict[str, str]:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_USERNAME": "dedupe-worker",
        "KAFKA_SASL_PASSWORD": SECRET,
        "KAFKA_SSL_CAFILE": str(ca_file),
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v != ""}


def test_plaintext_by_default_passes_nothing_extra() -> None:
    s = KafkaSecuritySettings()
    assert s.kafka_client_kwargs() == {}
    assert s.faust_credentials() is None
    assert s.spark_kafka_options() == {}
    assert s.kafka_security_problems() == []


def test_sasl_ssl_reaches_aiokafka_faust_and_spark(ca_file: Path) -> None:
    s = Settings.from_env(sasl_env(ca_file))
    kwargs = s.kafka_client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "dedupe-worker",
        SECRET,
    )
    assert kwargs["ssl_context"].check_hostname
    credentials = s.faust_credentials()
    assert isinstance(credentials, SASLCredentials)
    assert credentials.password == SECRET and credentials.mechanism.value == "SCRAM-SHA-512"
    assert SECRET not in repr(credentials)
    options = SparkSettings.from_env(sasl_env(ca_file)).spark_kafka_options()
    assert options == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="dedupe-worker" password="pa\\"ss\\\\word-3f9c";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca_file.resolve()),
    }


def test_the_password_can_come_from_a_file(ca_file: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text(SECRET + "\n")
    env = sasl_env(ca_file, KAFKA_SASL_PASSWORD="", KAFKA_SASL_PASSWORD_FILE=str(secret_file))
    s = IngestSettings.from_env(env)
    assert s.kafka_client_kwargs()["sasl_plain_password"] == SECRET


def test_an_empty_password_file_is_refused(ca_file: Path, tmp_path: Path) -> None:
    empty = tmp_path / "password"
    empty.write_text("\n")
    env = sasl_env(ca_file, KAFKA_SASL_PASSWORD="", KAFKA_SASL_PASSWORD_FILE=str(empty))
    with pytest.raises(SettingsError, match=f"KAFKA_SASL_PASSWORD_FILE='{empty}': empty"):
        Settings.from_env(env)


def test_the_password_is_never_in_repr_or_messages(ca_file: Path) -> None:
    s = Settings.from_env(sasl_env(ca_file))
    assert SECRET not in repr(s) and SECRET not in str(s)
    bad = sasl_env(ca_file, KAFKA_SASL_MECHANISM="GSSAPI", KAFKA_SASL_USERNAME="")
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(bad)
    assert SECRET not in str(caught.value)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "GSSAPI",
        "KAFKA_SASL_PASSWORD": "x",
        "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw"),
        "KAFKA_SSL_CAFILE": str(tmp_path / "missing.pem"),
        "KAFKA_SSL_CERTFILE": str(tmp_path / "missing-cert.pem"),
        "DEDUPE_PARTITIONS": "0",
    }
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    message = str(caught.value)
    for expected in (
        "KAFKA_SASL_MECHANISM='GSSAPI': use SCRAM-SHA-512, SCRAM-SHA-256, PLAIN",
        "KAFKA_SASL_USERNAME is needed with KAFKA_SECURITY_PROTOCOL=SASL_SSL",
        "set KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE, not both",
        f"KAFKA_SSL_CAFILE='{tmp_path / 'missing.pem'}': no such file",
        "set KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE together",
        "DEDUPE_PARTITIONS=0: must be 1..10000",
    ):
        assert expected in message


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "use PLAINTEXT, SSL or SASL_SSL"),
        (
            {"KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"},
            "SASL credentials are set but KAFKA_SECURITY_PROTOCOL='PLAINTEXT' would not send them",
        ),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "u"},
            "KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE is needed",
        ),
        ({"KAFKA_SSL_CAFILE": "/etc/hostname"}, "does not use TLS"),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/etc/hostname"},
            "KAFKA_SSL_CAFILE: cannot be loaded",
        ),
    ],
)
def test_each_service_refuses_bad_security_settings(env: dict[str, str], expected: str) -> None:
    for cls, error in (
        (Settings, SettingsError),
        (IngestSettings, SettingsError),
        (SparkSettings, SparkSettingsError),
    ):
        with pytest.raises(error, match="invalid settings") as caught:
            cls.from_env(env)
        assert expected in str(caught.value), cls


def test_java_tools_get_the_same_configs_without_the_spark_prefix(ca_file: Path) -> None:
    s = KafkaSecuritySettings.from_env(sasl_env(ca_file, KAFKA_SASL_MECHANISM="PLAIN"))
    props = s.java_client_properties()
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
