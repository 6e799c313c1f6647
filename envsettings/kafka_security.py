"""How a process authenticates to Kafka and encrypts its connections: one settings section
shared by the worker, the ingest service, the Spark job and the demo/verify tools.

Each service's settings class derives from :class:`KafkaSecuritySettings` instead of
``EnvSettings`` and adds :meth:`KafkaSecuritySettings.kafka_security_problems` to its start-up
checks. The clients are then built from one place:

- :meth:`~KafkaSecuritySettings.kafka_client_kwargs`: keyword arguments for every aiokafka
  client (producer, consumer, admin); empty for ``PLAINTEXT``, so a plaintext set-up passes
  exactly what it passed before;
- :meth:`~KafkaSecuritySettings.faust_credentials`: Faust's ``broker_credentials``;
- :meth:`~KafkaSecuritySettings.spark_kafka_options`: options of Spark's Kafka source
  (``kafka.security.protocol``, ``kafka.sasl.jaas.config``, a PEM truststore; Kafka clients
  >= 2.7 read PEM files).

The password is a secret: it is not part of the settings' ``repr``, no validation message
quotes it, and it is read from ``KAFKA_SASL_PASSWORD_FILE`` at start-up when given as a file.
docs/security.md says which principal each component uses and which ACLs it needs.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from aiokafka.helpers import create_ssl_context

from envsettings import EnvSettings, Setting, secret, setting

#: Values of ``KAFKA_SECURITY_PROTOCOL`` and ``KAFKA_SASL_MECHANISM``.
PLAINTEXT, SSL, SASL_SSL = "PLAINTEXT", "SSL", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_SSL)
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
#: Kafka's error code for a topic the principal may not describe (in a metadata answer).
TOPIC_AUTHORIZATION_FAILED = 29

#: The JAAS login module of each SASL mechanism (Java clients: Spark's Kafka connector).
_LOGIN_MODULES = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}


@dataclass(frozen=True)
class KafkaSecuritySettings(EnvSettings):
    """The Kafka security section of a service's settings (a base class: its fields first)."""

    security_protocol: str = setting(
        PLAINTEXT,
        "KAFKA_SECURITY_PROTOCOL",
        "How this process talks to Kafka: PLAINTEXT (no encryption, no identity; local "
        "development only), SSL (TLS; with KAFKA_SSL_CERTFILE the certificate is the identity) "
        "or SASL_SSL (TLS plus a SASL user name and password). See docs/security.md.",
    )
    sasl_mechanism: str = setting(
        "SCRAM-SHA-512",
        "KAFKA_SASL_MECHANISM",
        "SASL mechanism with SASL_SSL: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN.",
    )
    sasl_username: str = setting(
        "",
        "KAFKA_SASL_USERNAME",
        "SASL user name (the Kafka principal User:<name> the ACLs are granted to). Needed with "
        "SASL_SSL.",
    )
    sasl_password: str = secret(
        "",
        "KAFKA_SASL_PASSWORD",
        "SASL password (with SASL_SSL; or use KAFKA_SASL_PASSWORD_FILE). Never logged or shown.",
    )
    sasl_password_file: str = setting(
        "",
        "KAFKA_SASL_PASSWORD_FILE",
        "File holding the SASL password (a trailing newline is ignored), read at start-up; "
        "instead of KAFKA_SASL_PASSWORD, e.g. a mounted secret.",
    )
    ssl_cafile: str = setting(
        "",
        "KAFKA_SSL_CAFILE",
        "PEM file of the CA certificates that sign the brokers' certificates (SSL, SASL_SSL). "
        "Empty: the system's trusted CAs (Spark's Kafka connector: the JVM's).",
    )
    ssl_certfile: str = setting(
        "",
        "KAFKA_SSL_CERTFILE",
        "PEM file of this client's certificate, for brokers that ask for one (SSL, SASL_SSL); "
        "set together with KAFKA_SSL_KEYFILE.",
    )
    ssl_keyfile: str = setting(
        "",
        "KAFKA_SSL_KEYFILE",
        "PEM file of the private key of KAFKA_SSL_CERTFILE (unencrypted PKCS#8).",
    )

    def kafka_security_problems(self) -> list[str]:
        """Every problem with the security settings (messages name variables, never secrets)."""
        out: list[str] = []

        env = self.env_of
        tls = self.security_protocol in (SSL, SASL_SSL)
        if self.security_protocol not in PROTOCOLS:
            out.append(
                f"{env('security_protocol')}={self.security_protocol!r}: "
                "use PLAINTEXT, SSL or SASL_SSL"
            )
        if self.security_protocol == SASL_SSL:
            if self.sasl_mechanism not in MECHANISMS:
                out.append(
                    f"{env('sasl_mechanism')}={self.sasl_mechanism!r}: use {', '.join(MECHANISMS)}"
                )
            if not self.sasl_username.strip():
                out.append(
                    f"{env('sasl_username')} is needed with {env('security_protocol')}=SASL_SSL"
                )
            if self.sasl_password and self.sasl_password_file:
                out.append(f"set {env('sasl_password')} or {env('sasl_password_file')}, not both")
            elif self.sasl_password_file:
                file_problems = _file_problems(env("sasl_password_file"), self.sasl_password_file)
                if not file_problems and not self.kafka_password:
                    file_problems = [
                        f"{env('sasl_password_file')}={self.sasl_password_file!r}: empty"
                    ]
                out.extend(file_problems)
            elif not self.sasl_password:
                out.append(
                    f"{env('sasl_password')} or {env('sasl_password_file')} is needed with "
                    f"{env('security_protocol')}=SASL_SSL"
                )
        elif self.sasl_username or self.sasl_password or self.sasl_password_file:
            out.append(
                f"SASL credentials are set but {env('security_protocol')}="
                f"{self.security_protocol!r} would not send them (use SASL_SSL)"
            )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, name)
            if value and not tls:
                out.append(
                    f"{env(name)} is set but {env('security_protocol')}="
                    f"{self.security_protocol!r} does not use TLS"
                )
            elif value:
                out.extend(_file_problems(env(name), value))
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            out.append(f"set {env('ssl_certfile')} and {env('ssl_keyfile')} together")
        if tls and not out:
            try:
                _ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
            except (ssl.SSLError, OSError, ValueError) as exc:
                names = [env(n) for n in ("ssl_cafile", "ssl_certfile") if getattr(self, n)]
                out.append(f"{' / '.join(names) or 'TLS'}: cannot be loaded: {exc}")
        return out

    @property
    def kafka_password(self) -> str:
        """The SASL password, from ``KAFKA_SASL_PASSWORD`` or its file."""
        if self.sasl_password_file:
            return Path(self.sasl_password_file).read_text(encoding="utf-8").rstrip("\r\n")
        return self.sasl_password

    @property
    def kafka_principal(self) -> str:
        """Who this process is to Kafka, for messages: ``User:<name>``, or how it connects."""
        if self.security_protocol == SASL_SSL:
            return f"User:{self.sasl_username}"
        if self.security_protocol == SSL and self.ssl_certfile:
            return f"the certificate {self.ssl_certfile}"
        return f"an unauthenticated {self.security_protocol} client"

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an aiokafka producer, consumer or admin client."""
        if self.security_protocol == PLAINTEXT:
            return {}
        kwargs: dict[str, Any] = {
            "security_protocol": self.security_protocol,
            "ssl_context": _ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile),
        }
        if self.security_protocol == SASL_SSL:
            kwargs.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.kafka_password,
            )
        return kwargs

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` (None for PLAINTEXT)."""
        from faust.auth import SASLCredentials, SSLCredentials

        if self.security_protocol == PLAINTEXT:
            return None
        context = _ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if self.security_protocol == SSL:
            return SSLCredentials(context)
        return SASLCredentials(
            username=self.sasl_username,
            password=self.kafka_password,
            ssl_context=context,
            mechanism=self.sasl_mechanism,
        )

    def spark_kafka_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source/sink (``kafka.``-prefixed Kafka client configs)."""
        if self.security_protocol == PLAINTEXT:
            return {}
        options = {"kafka.security.protocol": self.security_protocol}
        if self.ssl_cafile:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(Path(self.ssl_cafile).resolve())
        if self.ssl_certfile:
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.certificate.chain"] = _pem(self.ssl_certfile)
            options["kafka.ssl.keystore.key"] = _pem(self.ssl_keyfile)
        if self.security_protocol == SASL_SSL:
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = (
                f"{_LOGIN_MODULES[self.sasl_mechanism]} required "
                f"username={_jaas_quote(self.sasl_username)} "
                f"password={_jaas_quote(self.kafka_password)};"
            )
        return options

    def java_client_properties(self) -> dict[str, str]:
        """The same as Java client configs (a kafka-tools ``--command-config`` file)."""
        return {k.removeprefix("kafka."): v for k, v in self.spark_kafka_options().items()}


#: The names of the security fields (the settings tables show them once, in their own table).
SECURITY_FIELDS = frozenset(f.name for f in fields(KafkaSecuritySettings))


def _file_problems(variable: str, path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        return [f"{variable}={path!r}: no such file"]
    try:
        p.read_bytes()
    except OSError as exc:
        return [f"{variable}={path!r}: cannot be read ({exc.strerror})"]
    return []


@functools.lru_cache(maxsize=8)
def _ssl_context(cafile: str, certfile: str, keyfile: str) -> ssl.SSLContext:
    """One TLS context per file set (loaded once; every client of the process shares it)."""
    context: ssl.SSLContext = create_ssl_context(
        cafile=cafile or None, certfile=certfile or None, keyfile=keyfile or None
    )
    return context


def _pem(path: str) -> str:
    return Path(path).read_text(encoding="ascii")


def _jaas_quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def security_table() -> str:
    """The markdown table of the security settings in docs/settings.md."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in fields(KafkaSecuritySettings):
        doc: Setting = f.metadata["setting"]
        shown = f"`{f.default}`" if f.default != "" else "(empty)"
        rows.append(f"| `{doc.env}` | {shown} | {doc.help} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m envsettings.kafka_security: the table of docs/settings.md
    print(security_table())
