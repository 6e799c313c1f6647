"""The secured broker of this tier: SASL_SSL (SCRAM) with ACLs, started here on its own ports
(``DEDUPE_TEST_SECURE_KAFKA_PORT``, default 19192; controller +1) and stopped at the end.

Each component connects as its own user (dedupe-worker, dedupe-ingest, dedupe-spark); the
tests read and check as the super user (admin). Every test has fresh topic, group and
transactional-id names and adds the ACLs of ``scripts.kafka_acls`` for them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from scripts import kafka_acls
from tests.faults.scenario import settings_of
from tests.support import KAFKA_SCRIPT, Broker, Names, unique_suffix
from tests.workers import Worker

PORT = int(os.environ.get("DEDUPE_TEST_SECURE_KAFKA_PORT", "19192"))


@dataclass(frozen=True)
class SecureBroker:
    """The secured broker, and the client settings of each of its users."""

    broker: Broker

    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ,
            KAFKA_SECURITY="sasl_ssl",
            KAFKA_PORT=str(self.broker.port),
            KAFKA_CONTROLLER_PORT=str(self.broker.port + 1),
        )
        return subprocess.run(
            [str(KAFKA_SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def env_of(self, user: str) -> dict[str, str]:
        """The settings (environment variables) of a client connecting as ``user``."""
        result = self.script("client-env", user)
        assert result.returncode == 0, result.stderr
        return dict(line.split("=", 1) for line in result.stdout.splitlines())

    def password_of(self, user: str) -> str:
        return Path(self.env_of(user)["KAFKA_SASL_PASSWORD_FILE"]).read_text()

    def admin(self, names: Names, partitions: int = 4) -> Settings:
        """The pipeline's settings as the super user (to feed, read and verify)."""
        return settings_of(self.broker, names, partitions, self.env_of("admin"))

    def client(self, user: str) -> dict[str, Any]:
        """aiokafka's security arguments of ``user``."""
        return Settings.from_env(self.env_of(user)).kafka_client_kwargs()

    def grant(self, names: Names, partitions: int = 4, **acl_options: Any) -> list[Any]:
        """Add every component's ACLs for the pipeline of ``names``; returns them."""
        acls = kafka_acls.all_acls(self.admin(names, partitions), **acl_options)
        self.apply(acls)
        return acls

    def apply(self, acls: list[Any]) -> None:
        kafka_acls.apply(
            acls,
            env=dict(
                os.environ,
                KAFKA_PORT=str(self.broker.port),
                KAFKA_CONTROLLER_PORT=str(self.broker.port + 1),
            ),
        )


@pytest.fixture(scope="session")
def secure() -> Iterator[SecureBroker]:
    """Start the secured broker for this tier and stop it at the end."""
    s = SecureBroker(Broker(f"127.0.0.1:{PORT}", PORT))
    started = s.script("up")
    if started.returncode != 0:
        pytest.fail(f"cannot start the secured broker:\n{started.stderr[-4000:]}")
    yield s
    s.script("down")


@pytest.fixture
def names(tmp_path: Path) -> Names:
    return Names(unique_suffix(), tmp_path)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """A list to append workers to; every one still running is killed after the test."""
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()


def worker_as(secure: SecureBroker, names: Names, user: str, **env: str) -> Worker:
    """A worker of the pipeline of ``names`` connecting as ``user`` (more settings: ``env``)."""
    return Worker(secure.broker, names, extra_env={**secure.env_of(user), **env})
