"""What a Redis restart loses, per persistence setting (docs/idempotent-consumer.md says the
same). Each case starts a Redis of its own, completes 100 claims, restarts it and counts the
ids that are still remembered (a forgotten id's repeat would run its effect again)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from idempotent_consumer import RedisStore, SyncIdempotency

from tests.idempotency.conftest import Servers
from tests.workers import port_in_range

pytestmark = pytest.mark.idempotency

IDS = [f"evt-{i}" for i in range(100)]


def free_port() -> int:
    """A port of this tier's own range for Redis servers of a single test (16380-16389)."""
    return port_in_range(16380, 10)


class OwnRedis:
    def __init__(self, binary: str, data: Path, *options: str) -> None:
        self.binary, self.data, self.options = binary, data, options
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data),
                "--daemonize",
                "no",
                "--logfile",
                str(self.data / "redis.log"),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                # (loading the AOF/RDB answers LOADING errors until done)
                if client.ping():
                    break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def own_redis(servers: Servers, tmp_path: Path) -> Iterator[list[OwnRedis]]:
    started: list[OwnRedis] = []
    yield started
    for r in started:
        r.stop()


def complete(url: str, ids: list[str]) -> None:
    store = RedisStore(url)
    idem = SyncIdempotency(store, "billing")
    for e in ids:
        with idem.claim(e) as claim:
            claim.complete(e)
    store.close_sync()


def remembered(url: str) -> int:
    client = redis.Redis.from_url(url)
    n = sum(1 for e in IDS if client.exists(f"idem:billing:{e}"))
    client.close()
    return n


CASES = {
    # name: (options, how it goes down, snapshot after the first half?)
    "none": (["--save", "", "--appendonly", "no"], "kill -9", False),
    "rdb": (["--save", "", "--appendonly", "no"], "kill -9", True),
    "rdb-shutdown": (["--save", "", "--appendonly", "no"], "SHUTDOWN SAVE", False),
    "aof-everysec": (
        ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
        "kill -9",
        False,
    ),
}
EXPECTED_LOST = {"none": 100, "rdb": 50, "rdb-shutdown": 0, "aof-everysec": 0}


@pytest.mark.parametrize("case", list(CASES))
def test_what_a_redis_restart_loses(
    servers: Servers, tmp_path: Path, own_redis: list[OwnRedis], case: str, figures: list[str]
) -> None:
    options, down, snapshot_half = CASES[case]
    r = OwnRedis(servers.redis_bin, tmp_path, *options)
    own_redis.append(r)
    r.start()
    if snapshot_half:
        complete(r.url, IDS[:50])
        client = redis.Redis.from_url(r.url)
        client.save()  # an RDB snapshot, as a "save <seconds> <changes>" rule would take
        client.close()
        complete(r.url, IDS[50:])
    else:
        complete(r.url, IDS)
    assert remembered(r.url) == 100
    if down == "kill -9":
        r.kill9()
    else:
        client = redis.Redis.from_url(r.url)
        with contextlib.suppress(redis.ConnectionError):  # it closes the connection
            client.shutdown(save=True)
        assert r.proc is not None
        r.proc.wait(10)
    r.start()
    lost = 100 - remembered(r.url)
    assert lost == EXPECTED_LOST[case]
    # what a forgotten id means: its repeat runs again
    store = RedisStore(r.url)
    idem = SyncIdempotency(store, "billing")
    reruns = 0
    for e in IDS:
        with idem.claim(e) as claim:
            if not claim.done:
                reruns += 1
    store.close_sync()
    assert reruns == lost
    figures.append(f"redis restart [{case}, {down}]: {lost} of 100 completed ids lost -> rerun")
