"""A fault proxy for the network fault tests: a TCP proxy between one client process (a worker,
the ingest service) and the broker, controlled by the test while the client runs.

Each :class:`Link` listens on the port a broker listener advertises (``KAFKA_EXTRA_LISTENERS``
of ``scripts/kafka-local.sh``: ``NAME:listen_port:advertised_port``) and forwards to that
listener's real port, so every connection the client opens, bootstrap and all, goes through
it. The test can, at any moment:

- add latency and jitter to every byte, in either direction (order is kept);
- slow bytes to a rate (bytes per second);
- cut the link in one direction or both: the bytes are dropped (as a partition drops packets),
  and :meth:`Link.heal` resets the connections that lost bytes (their streams are broken);
- hold the link: nothing passes until the heal, then everything held is delivered late;
- reset every connection (RST), or reset a connection when a chosen request passes (before
  or after it reaches the broker), e.g. mid-commit;
- rewrite the error code of the next answers to a request type (``fail_next``: the broker's
  TRANSACTION_ABORTABLE or CONCURRENT_TRANSACTIONS, as the client would see it);
- hold the next request of a type (``hold_next``) with what follows it on its connection, until
  :meth:`Link.release`: it reaches the broker then, even if the client gave up on it and
  closed the connection meanwhile (a request delayed in the network past its timeout).

The proxy reads the Kafka frames it forwards (size-prefixed requests, answers matched by
correlation id) and keeps a log of the transaction requests it saw (:class:`TxnRequest`:
``EndTxn`` and ``InitProducerId`` with producer id, epoch and answer), which the tests use to
drive the timing of a fault and to prove what a cut-off client did after the heal.

How to run: it is started by the network fault tests (``tests/faults/network/``,
``make test-faults``); by hand::

    link = Link(listen_port=49205, target_port=49204).start()
    link.cut("both"); ...; link.heal(); link.stop()
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.faults.kafka_frames import TxnRequest
from tests.faults.proxy_conn import Action, Conn, Held

Direction = Literal["both", "to-broker", "from-broker"]


@dataclass
class Link:
    """One client's link to the broker (see the module docstring). Thread-safe controls."""

    listen_port: int
    target_port: int
    seed: int = 0
    latency: float = 0.0
    jitter: float = 0.0
    rate: float | None = None  # bytes per second, each direction; None: unlimited
    #: Called for each request frame before it is forwarded (on the proxy's thread).
    on_request: Callable[[int, TxnRequest | None], Action] | None = None
    txn_requests: list[TxnRequest] = field(default_factory=list)
    #: (time.monotonic(), api key) of each JoinGroup and SyncGroup request sent on
    group_requests: list[tuple[float, int]] = field(default_factory=list)
    resets: int = 0
    connections: int = 0
    dropped_bytes: int = 0
    #: The answers rewritten by :meth:`fail_next`: (API key, the broker's error codes).
    rewritten: list[tuple[int, list[int]]] = field(default_factory=list)
    #: The request :meth:`hold_next` held, once one was.
    held: Held | None = None
    _fail: list[tuple[int, int]] = field(default_factory=list)
    _hold_api: int | None = None
    _cut_up: bool = False
    _cut_down: bool = False
    _hold: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _conns: set[Conn] = field(default_factory=set)
    _thread: threading.Thread | None = None

    def start(self) -> Link:
        ready = threading.Event()
        self._rng = random.Random(self.seed)

        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
                )
            except OSError as exc:  # the port is taken
                failed.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            # The connections were reset by stop(): their pumps end on their own once they see
            # it. Let them, on this loop, or their ``finally`` runs at garbage collection against
            # a closed loop ("Event loop is closed").
            pending = asyncio.all_tasks(loop)
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=5))
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name=f"proxy-{self.listen_port}")
        self._thread.start()
        ready.wait(10)
        if failed:
            self._loop = None
            raise RuntimeError(f"proxy cannot listen on {self.listen_port}: {failed[0]!r}")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        self._call(self._close_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop = None

    # -- controls (from the test's thread) -------------------------------------------------------

    def cut(self, direction: Direction = "both") -> None:
        """Drop every byte in ``direction`` from now on, on every connection, new ones too."""
        self._cut_up = direction in ("both", "to-broker")
        self._cut_down = direction in ("both", "from-broker")

    def hold(self) -> None:
        """Hold every byte, both directions, from now on until :meth:`heal`, which delivers
        them: a partition that delays instead of losing, so that what the client sent during
        it reaches the broker after the heal (as TCP retransmits after a short outage)."""
        self._hold = True

    @property
    def is_cut(self) -> bool:
        return self._cut_up or self._cut_down or self._hold

    def heal(self) -> int:
        """Forward again (held bytes first); reset the connections that lost bytes. Returns how
        many were reset."""
        self._cut_up = self._cut_down = self._hold = False
        return int(self._call(self._reset_damaged))

    def clear(self) -> None:
        """No fault and an empty log: what a test starts from."""
        self.latency = self.jitter = 0.0
        self.rate = None
        self.on_request = None
        self._fail.clear()
        self.release()
        self.heal()
        self.txn_requests.clear()
        self.rewritten.clear()
        self.held = None
        self.resets = self.connections = self.dropped_bytes = 0

    def fail_next(self, api_key: int, error: int, times: int = 1) -> None:
        """Set every partition's error code to ``error`` in the next ``times`` answers to
        requests of ``api_key`` (the versions of ``kafka_frames.REWRITABLE``)."""
        self._fail += [(api_key, error)] * times

    def failing(self) -> int:
        """How many of the answers :meth:`fail_next` asked for are still to come."""
        return len(self._fail)

    def hold_next(self, api_key: int) -> None:
        """Hold the next request of ``api_key``, on whichever connection it comes, and what
        follows it on that connection, until :meth:`release` (see the module docstring)."""
        self.held = None
        self._hold_api = api_key

    def release(self) -> None:
        """Deliver the held request (and what queued behind it)."""
        self._hold_api = None
        if self.held is not None:
            self.held.released = True

    def reset_all(self) -> int:
        """Reset every open connection now; returns how many."""
        return int(self._call(self._reset_every))

    def txn_log(self) -> list[TxnRequest]:
        return list(self.txn_requests)

    # -- the proxy's thread -------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        assert self._loop is not None
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return done.result(10)

    def _close_all(self) -> None:
        assert self._server is not None
        self._server.close()
        self._reset_every()

    def _reset_every(self) -> int:
        conns = list(self._conns)
        for c in conns:
            c.reset()
        return len(conns)

    def _reset_damaged(self) -> int:
        damaged = [c for c in self._conns if c.damaged]
        for c in damaged:
            c.reset()
        return len(damaged)

    def _delay(self) -> float:
        if not self.latency and not self.jitter:
            return 0.0
        return max(0.0, self.latency + self._rng.uniform(-self.jitter, self.jitter))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        conn = Conn(self, reader, writer, up_reader, up_writer)
        self._conns.add(conn)
        try:
            await conn.run()
        finally:
            self._conns.discard(conn)
