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
  or after it reaches the broker), e.g. mid-commit.

The proxy reads the Kafka frames it forwards (size-prefixed requests, answers matched by
correlation id) and keeps a log of the transaction requests it saw (:class:`TxnRequest`:
``EndTxn`` and ``InitProducerId`` with producer id, epoch and answer), which the tests use to
drive the timing of a fault and to prove what a cut-off client did after the heal.

How to run: it is started by ``tests/faults/test_network.py`` (``make test-faults``); by hand::

    link = Link(listen_port=49205, target_port=49204).start()
    link.cut("both"); ...; link.heal(); link.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["both", "to-broker", "from-broker"]

#: Kafka API keys the proxy reads (https://kafka.apache.org/protocol#protocol_api_keys).
PRODUCE, JOIN_GROUP, SYNC_GROUP, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = (
    0,
    11,
    14,
    22,
    24,
    26,
)
#: First flexible version (compact strings, tagged fields) of each API read here.
FLEXIBLE_FROM = {INIT_PRODUCER_ID: 2, END_TXN: 3}


@dataclass
class TxnRequest:
    """An ``EndTxn`` or ``InitProducerId`` seen on a link."""

    api_key: int
    forwarded_at: float  # time.monotonic() when it was sent on to the broker; 0: never was
    producer_id: int = -1  # EndTxn: the request's; InitProducerId: the answer's
    epoch: int = -1
    committed: bool = False  # EndTxn: commit (True) or abort
    transactional_id: str = ""
    error: int | None = None  # the broker's error code (0: success); None: no answer seen
    action: str | None = None  # what ``Link.on_request`` did to it ("reset-before"...)


@dataclass
class _Frame:
    data: bytes
    api_key: int = -1
    txn: TxnRequest | None = None


class _Reader:
    """Splits a byte stream into Kafka frames (4-byte size prefix)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            size = struct.unpack_from(">i", self.buf)[0]
            if len(self.buf) < 4 + size:
                break
            frames.append(bytes(self.buf[: 4 + size]))
            del self.buf[: 4 + size]
        return frames

    def rest(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _string(b: bytes, i: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n, i = _uvarint(b, i)
        n -= 1
    else:
        n = struct.unpack_from(">h", b, i)[0]
        i += 2
    if n < 0:
        return "", i
    return b[i : i + n].decode(errors="replace"), i + n


def parse_request(frame: bytes) -> tuple[int, int, int, TxnRequest | None]:
    """(api key, version, correlation id, the transaction request it is, if one)."""
    api_key, version, corr = struct.unpack_from(">hhi", frame, 4)
    flexible = version >= FLEXIBLE_FROM.get(api_key, 1 << 15)
    if api_key not in (END_TXN, INIT_PRODUCER_ID):
        return api_key, version, corr, None
    i = 12
    client_len = struct.unpack_from(">h", frame, i)[0]
    i += 2 + max(client_len, 0)
    if flexible:
        n, i = _uvarint(frame, i)  # header tagged fields (none expected)
        assert n == 0, "tagged fields in a request header"
    txn = TxnRequest(api_key, 0.0)
    txn.transactional_id, i = _string(frame, i, flexible)
    if api_key == END_TXN:
        txn.producer_id, txn.epoch, committed = struct.unpack_from(">qhb", frame, i)
        txn.committed = bool(committed)
    return api_key, version, corr, txn


def parse_answer(frame: bytes, api_key: int, version: int, txn: TxnRequest) -> None:
    """Fill ``txn`` from its answer (error code; InitProducerId: producer id and epoch)."""
    i = 8  # size, correlation id
    if version >= FLEXIBLE_FROM.get(api_key, 1 << 15):
        _, i = _uvarint(frame, i)  # response header tagged fields
    _throttle, txn.error = struct.unpack_from(">ih", frame, i)
    if api_key == INIT_PRODUCER_ID:
        txn.producer_id, txn.epoch = struct.unpack_from(">qh", frame, i + 6)


#: What to do with a request on its way to the broker: None (forward it), "reset-before" (reset
#: the connection instead: the request is lost), "reset-after" (forward it, then reset the
#: connection before its answer can come back).
Action = Literal["reset-before", "reset-after"] | None


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
    _cut_up: bool = False
    _cut_down: bool = False
    _hold: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _conns: set[_Conn] = field(default_factory=set)
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
        conn = _Conn(self, reader, writer, up_reader, up_writer)
        self._conns.add(conn)
        try:
            await conn.run()
        finally:
            self._conns.discard(conn)


class _Conn:
    """One proxied connection: two pumps, each a reader and a delayed writer."""

    def __init__(
        self,
        link: Link,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        broker_r: asyncio.StreamReader,
        broker_w: asyncio.StreamWriter,
    ) -> None:
        self.link = link
        self.client_r, self.client_w = client_r, client_w
        self.broker_r, self.broker_w = broker_r, broker_w
        self.damaged = False
        self.closed = False
        self.mute_answers = False  # set before a "reset-after" request goes on
        #: correlation id -> (api key, version, the transaction request) of requests sent on
        self.pending: dict[int, tuple[int, int, TxnRequest | None]] = {}

    def reset(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.link.resets += 1
        for w in (self.client_w, self.broker_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):  # RST, not FIN: the peer sees a reset
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()

    async def run(self) -> None:
        pumps = [
            asyncio.ensure_future(self._pump(self.client_r, self.broker_w, up=True)),
            asyncio.ensure_future(self._pump(self.broker_r, self.client_w, up=False)),
        ]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for p in pumps:
            p.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        if not self.closed:
            self.closed = True
            for w in (self.client_w, self.broker_w):
                w.transport.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, _Frame | None]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer, up=up))
        frames = _Reader()
        last = 0.0
        try:
            while not self.closed:
                data = await reader.read(65536)
                if not data:
                    break
                now = time.monotonic()
                for raw in frames.feed(data):
                    frame = self._observe(raw, up)
                    last = max(last, now + self.link._delay())
                    queue.put_nowait((last, frame))
            rest = frames.rest()
            if rest:
                queue.put_nowait((last, _Frame(rest)))
            queue.put_nowait((last, None))
            await sender
        finally:
            sender.cancel()

    def _observe(self, raw: bytes, up: bool) -> _Frame:
        frame = _Frame(raw)
        try:
            if up:
                api_key, version, corr, txn = parse_request(raw)
                frame.api_key, frame.txn = api_key, txn
                self.pending[corr] = (api_key, version, txn)
                if txn is not None:
                    self.link.txn_requests.append(txn)
            else:
                corr = struct.unpack_from(">i", raw, 4)[0]
                api_key, version, txn = self.pending.pop(corr, (-1, 0, None))
                if txn is not None:
                    parse_answer(raw, api_key, version, txn)
        except (struct.error, IndexError, AssertionError):
            pass  # not a frame the proxy understands: forwarded as it is
        return frame

    async def _send(
        self, queue: asyncio.Queue[tuple[float, _Frame | None]], w: asyncio.StreamWriter, up: bool
    ) -> None:
        link = self.link
        while True:
            at, frame = await queue.get()
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if frame is None:
                if not self.closed and w.can_write_eof():
                    w.write_eof()
                return
            if self.closed:
                return
            if (link._cut_up if up else link._cut_down) or (not up and self.mute_answers):
                self.damaged = True
                link.dropped_bytes += len(frame.data)
                continue
            action = link.on_request(frame.api_key, frame.txn) if up and link.on_request else None
            if frame.txn is not None:
                frame.txn.action = action
            if action == "reset-before":
                self.reset()
                return
            if action == "reset-after":
                self.mute_answers = True
            # A flag polled, not an asyncio.Event: the test's thread sets and clears it.
            while link._hold and not self.closed:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            if self.closed:
                return
            await self._write(w, frame.data)
            if frame.txn is not None:
                frame.txn.forwarded_at = time.monotonic()
            if up and frame.api_key in (JOIN_GROUP, SYNC_GROUP):
                link.group_requests.append((time.monotonic(), frame.api_key))
            if action == "reset-after":
                await asyncio.sleep(0.2)  # the broker acts on it; its answer is not passed on
                self.reset()
                return

    async def _write(self, w: asyncio.StreamWriter, data: bytes) -> None:
        """Write ``data``; while the link has a rate, 4 KB at a time at that rate (read again
        for each piece, so that a large frame speeds up when the rate is lifted)."""
        view = memoryview(data)
        while view:
            rate = self.link.rate
            piece = view[:4096] if rate else view
            w.write(piece)
            await w.drain()
            view = view[len(piece) :]
            if rate:
                await asyncio.sleep(len(piece) / rate)
