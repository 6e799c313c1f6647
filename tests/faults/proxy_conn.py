"""One connection through the fault proxy (tests/faults/proxy.py): the client's and the
broker's streams, a pump each way that reads Kafka frames (tests/faults/kafka_frames.py),
delays, holds, drops or resets them as the :class:`~tests.faults.proxy.Link` says, and logs the
transaction requests with their answers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tests.faults.kafka_frames import (
    CONCURRENT_TRANSACTIONS,
    END_TXN,
    JOIN_GROUP,
    REWRITABLE,
    SYNC_GROUP,
    Frame,
    Reader,
    TxnRequest,
    answer_errors,
    parse_answer,
    parse_request,
    rewrite_end_txn_error,
    rewrite_errors,
)

if TYPE_CHECKING:
    from tests.faults.proxy import Link

#: What to do with a request on its way to the broker: None (forward it), "reset-before" (reset
#: the connection instead: the request is lost), "reset-after" (forward it, then reset the
#: connection before its answer can come back), "concurrent" (an EndTxn only: forward it, and
#: give the client CONCURRENT_TRANSACTIONS instead of the broker's answer, as a coordinator
#: answers an EndTxn that comes while the same transaction's markers are written; only for a
#: request the broker acts on by changing nothing, such as the retry of a done commit).
Action = Literal["reset-before", "reset-after", "concurrent"] | None


@dataclass
class Held:
    """The request ``Link.hold_next`` held."""

    api_key: int
    version: int
    correlation_id: int
    held_at: float
    released: bool = False
    #: When it was sent on to the broker (0: not yet).
    forwarded_at: float = 0.0
    #: Whether the client had closed the connection by then (it gave up on the request).
    client_gone: bool = False
    #: The broker's partition error codes in its answer (None: no answer seen yet; empty: an
    #: answer of a version the proxy does not read).
    answer: list[int] | None = None


class Conn:
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
        #: The request held on this connection (``Link.hold_next``), and its answer's arrival.
        self.held: Held | None = None
        self.held_answered = asyncio.Event()
        self.client_closed = False

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
        queue: asyncio.Queue[tuple[float, Frame | None]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer, up=up))
        frames = Reader()
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
                queue.put_nowait((last, Frame(rest)))
            if up:
                self.client_closed = True
            queue.put_nowait((last, None))
            await sender
        finally:
            sender.cancel()

    def _observe(self, raw: bytes, up: bool) -> Frame:
        frame = Frame(raw)
        try:
            if up:
                api_key, version, corr, txn = parse_request(raw)
                frame.api_key, frame.version, frame.correlation_id = api_key, version, corr
                frame.txn = txn
                self.pending[corr] = (api_key, version, txn)
                if txn is not None:
                    self.link.txn_requests.append(txn)
            else:
                corr = struct.unpack_from(">i", raw, 4)[0]
                api_key, version, txn = self.pending.pop(corr, (-1, 0, None))
                if txn is not None:
                    parse_answer(raw, api_key, version, txn)
                    if txn.action == "concurrent" and api_key == END_TXN:
                        txn.broker_error, txn.error = txn.error, CONCURRENT_TRANSACTIONS
                        frame.data = rewrite_end_txn_error(raw, version, CONCURRENT_TRANSACTIONS)
                self._answer_seen(frame, api_key, version, corr)
        except (struct.error, IndexError, AssertionError):
            pass  # not a frame the proxy understands: forwarded as it is
        return frame

    def _answer_seen(self, frame: Frame, api_key: int, version: int, corr: int) -> None:
        """Rewrite the answer as ``Link.fail_next`` asked; note the held request's answer."""
        link = self.link
        held = self.held
        if held is not None and held.correlation_id == corr:
            readable = (api_key, version) in REWRITABLE
            held.answer = answer_errors(frame.data, api_key, version) if readable else []
            self.held_answered.set()
        if (api_key, version) not in REWRITABLE:
            return
        wanted = next((f for f in link._fail if f[0] == api_key), None)
        if wanted is not None:
            link._fail.remove(wanted)
            link.rewritten.append((api_key, answer_errors(frame.data, api_key, version)))
            frame.data = rewrite_errors(frame.data, api_key, version, wanted[1])

    async def _send(
        self, queue: asyncio.Queue[tuple[float, Frame | None]], w: asyncio.StreamWriter, up: bool
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
            if up and link._hold_api is not None and frame.api_key == link._hold_api:
                link._hold_api = None
                self.held = link.held = Held(
                    frame.api_key, frame.version, frame.correlation_id, time.monotonic()
                )
                while not self.held.released and not self.closed:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
                self.held.client_gone = self.client_closed
            if self.closed:
                return
            await self._write(w, frame.data)
            if up and self.held is not None and self.held.correlation_id == frame.correlation_id:
                self.held.forwarded_at = time.monotonic()
                # Its answer before anything more from a client that gave up: an end of the
                # stream right behind it could close the connection before the broker acts.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.held_answered.wait(), 30)
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
