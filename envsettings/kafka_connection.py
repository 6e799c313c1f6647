"""Why a Kafka client cannot connect: one diagnosis for every component's start-up error.

aiokafka's "Unable to bootstrap" only logs the reason, so a component that fails to start its
client calls :func:`connection_problem` to say why, in terms of its settings: refused
credentials, a broker certificate the CA does not sign, a TLS client on a plaintext port, a
plaintext client on a TLS port, a client without SASL on a SASL listener, or no broker.
"""

from __future__ import annotations

import ssl

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.metadata import MetadataRequest

from envsettings.kafka_security import PLAINTEXT, SASL_SSL, KafkaSecuritySettings


async def connection_problem(settings: KafkaSecuritySettings, bootstrap_servers: str) -> str:
    """Why no connection to the first of ``bootstrap_servers`` comes up, for a start-up error."""
    host, _, port = bootstrap_servers.split(",")[0].strip().rpartition(":")
    try:
        conn = await create_conn(
            host, int(port), request_timeout_ms=10_000, **settings.kafka_client_kwargs()
        )
    except SaslAuthenticationFailed as exc:
        return f"the broker refused the credentials of {settings.kafka_principal}: {exc}"
    except ssl.SSLCertVerificationError as exc:
        ca = settings.ssl_cafile or "the system's CAs"
        return f"the broker's TLS certificate is not trusted ({ca}): {exc.verify_message}"
    except (TimeoutError, ssl.SSLError) as exc:
        protocol = settings.security_protocol
        return f"no TLS handshake with {host}:{port} (is it a {protocol} port?): {exc!r}"
    except OSError as exc:
        return f"no broker answers at {host}:{port}: {exc.strerror or exc}"
    except KafkaConnectionError as exc:
        if settings.security_protocol == PLAINTEXT:
            return f"{exc} (a PLAINTEXT client on a TLS port? see KAFKA_SECURITY_PROTOCOL)"
        return str(exc)
    except Exception as exc:  # any other refusal: say what it was
        return f"{type(exc).__name__}: {exc}"
    try:
        return await _first_requests_problem(conn, settings, f"{host}:{port}")
    finally:
        conn.close()


async def _first_requests_problem(conn: object, settings: KafkaSecuritySettings, at: str) -> str:
    """Send the requests every client starts with. A SASL listener lets a client without SASL
    finish the TLS handshake and even answers ApiVersions (Kafka allows it before the SASL
    handshake, KIP-35/KIP-43), then closes the connection on the first other request (Kafka's
    SaslServerAuthenticator: "Unexpected Kafka request ... during SASL handshake"): a metadata
    request is the one that tells."""
    try:
        for request in (ApiVersionRequest(), MetadataRequest([])):
            await conn.send(request)  # type: ignore[attr-defined]
    except KafkaConnectionError as exc:
        if settings.security_protocol != SASL_SSL:
            return (
                f"the broker at {at} closed the connection on the first request from this "
                f"{settings.security_protocol} client; it may expect SASL: set "
                "KAFKA_SECURITY_PROTOCOL=SASL_SSL with KAFKA_SASL_MECHANISM (default "
                "SCRAM-SHA-512), KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD(_FILE) "
                f"(docs/security.md) ({exc})"
            )
        return f"the broker at {at} closed the connection on the first request ({exc})"
    return f"a connection to {at} works now; the broker may have been starting"
