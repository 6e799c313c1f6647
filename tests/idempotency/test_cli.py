"""``python -m idempotent_consumer``: the schema SQL, the schema on a real server, sizing."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.idempotency.conftest import Servers


def cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "idempotent_consumer", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def test_schema_print_and_sizing() -> None:
    sql = cli("schema", "--print", "--table", "billing_records")
    assert "PARTITION BY RANGE (period)" in sql
    assert "ON CONFLICT DO NOTHING" in sql and "billing_records_claim" in sql
    assert cli("sizing", "--catch", "0.9", "--after", "3600000").startswith("slots=34168399 ")


@pytest.mark.idempotency
def test_schema_and_maintain_on_the_server(servers: Servers, table: str) -> None:
    out = cli("schema", "--dsn", servers.dsn, "--table", table)
    assert "created" in out and f"{table}_p" in out
    with psycopg.connect(servers.dsn) as conn:
        row = conn.execute(
            "SELECT to_regprocedure(%s)",
            (f"{table}_claim(text,text,bytea,uuid,bigint,bigint,bigint,boolean)",),
        ).fetchone()
    assert row is not None and row[0] is not None
    assert "created no partitions, dropped none" in cli(
        "maintain", "--dsn", servers.dsn, "--table", table
    )
