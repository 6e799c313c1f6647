"""Generated ingest requests, shared by the property test in-process (``test_fuzz_requests.py``,
Hypothesis draws every choice, and shrinks a failure) and the 10,000-request run against the
real service (``test_fuzz_requests_http.py``, a seeded ``random.Random`` draws them: Hypothesis
takes about 4 ms per request here, as long as the service takes to answer it).

One builder, :func:`build_request`, makes every choice through a :class:`Chooser`."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

from tests.ingest.support import WRITE_KEY, basic

T = TypeVar("T")

KINDS = ["batch", "track", "identify", "page", "screen", "group", "alias", "t", "b", "nope"]
EVENT_KINDS = ["track", "identify", "page", "screen", "group", "alias"]
#: Characters that make text hard: multi-byte, NUL, quotes, a lone surrogate.
NASTY = 'aZ0 é€𝄞\u0000"\\\n\ud800'


class Chooser(Protocol):
    def pick(self, options: Sequence[T]) -> T: ...
    def integer(self, lo: int, hi: int) -> int: ...
    def text(self, min_size: int, max_size: int) -> str: ...
    def binary(self, max_size: int) -> bytes: ...
    def json(self) -> Any: ...


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


class Drawn:
    """Choices drawn by Hypothesis."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def text(self, min_size: int, max_size: int) -> str:
        return self.draw(
            st.text(st.sampled_from(NASTY) | st.characters(), min_size=min_size, max_size=max_size)
        )

    def binary(self, max_size: int) -> bytes:
        return self.draw(st.binary(max_size=max_size))

    def json(self) -> Any:
        return self.draw(json_values)


class Seeded:
    """Choices from a seeded ``random.Random`` (fast; the same requests every run)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return self.rng.choice(options)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def text(self, min_size: int, max_size: int) -> str:
        n = self.rng.randint(min_size, max_size)
        r = self.rng
        return "".join(
            r.choice(NASTY) if r.random() < 0.1 else r.choice("abcxyz") for _ in range(n)
        )

    def binary(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))

    def json(self, depth: int = 0) -> Any:
        roll = self.rng.randrange(8 if depth < 2 else 6)
        if roll == 6:
            return [self.json(depth + 1) for _ in range(self.rng.randrange(3))]
        if roll == 7:
            return {self.text(0, 5): self.json(depth + 1) for _ in range(self.rng.randrange(3))}
        if roll == 0:
            return None
        if roll == 1:
            return self.rng.random() < 0.5
        if roll == 2:
            return self.rng.randint(-(10**20), 10**20)
        if roll == 3:
            return self.rng.random() * 1e6
        return self.text(0, 10)


def build_event(c: Chooser, typed: bool, kind: str | None = None) -> dict[str, Any]:
    """A Segment event (of ``kind``, or any), often valid, often breaking one rule."""
    kind = kind if kind in EVENT_KINDS else c.pick(EVENT_KINDS)
    event: dict[str, Any] = {}
    if typed:
        event["type"] = c.pick([kind] * 20 + ["bogus", 3])
    if c.integer(0, 19):
        event["userId"] = c.text(1, 8)
    else:
        event["anonymousId"] = c.pick(["", 0, 7, True, None, c.text(0, 8), c.json()])
    if kind == "group" and c.integer(0, 19):
        event["groupId"] = c.pick([c.text(1, 8), 42])
    if kind == "alias" and c.integer(0, 19):
        event["previousId"] = c.pick([c.text(1, 8), 42])
    if kind == "track" and c.integer(0, 19):
        event["event"] = c.pick(["Product Viewed"] * 8 + ["", c.text(1, 12), 5])
    for name in ("properties", "context", "traits"):
        if c.integer(0, 2) == 0:
            event[name] = c.json()
    if c.integer(0, 3) == 0:
        event["timestamp"] = c.pick(["2030-01-01T00:00:00Z", c.text(0, 25)])
    if c.integer(0, 9) == 0:
        event["writeKey"] = c.pick([WRITE_KEY, "other"])
    if c.integer(0, 3):
        event["messageId"] = c.pick(
            [
                *[f"fz-{c.integer(0, 10**12)}"] * 8,
                c.text(0, 12),
                "é€" * c.integer(40, 70),  # past the 256-byte limit from about 43
                "\ud800x",
                5,
                None,
            ]
        )
    return event


@dataclass
class Request:
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    #: The events as sent (None: the body is not a JSON document of events).
    events: list[dict[str, Any]] | None = None


def build_request(c: Chooser) -> Request:
    """A request to /v1/<kind>: mostly well-formed JSON, sometimes broken in its headers
    (content type, charset, coding, key) or its body (not JSON, not an object, cut short,
    gzip junk, not UTF-8)."""
    kind = c.pick(KINDS)
    headers: dict[str, str] = {}
    content_type = c.pick(
        ["application/json"] * 12
        + ["text/plain", "application/json; charset=latin-1", "text/html", ""]
    )
    if content_type:
        headers["Content-Type"] = content_type
    auth = c.pick(["header"] * 12 + ["wrong", "body", "none"])
    if auth == "header":
        headers["Authorization"] = basic(WRITE_KEY)
    elif auth == "wrong":
        headers["Authorization"] = basic("not-a-key")
    evts: list[dict[str, Any]] | None
    if kind in ("batch", "b"):
        evts = [build_event(c, typed=True) for _ in range(c.integer(0, 5))]
        doc: Any = {"batch": evts}
        if c.integer(0, 1):
            doc["context"] = {"library": {"name": "fuzz"}}
        if c.integer(0, 1):
            doc["sentAt"] = "2030-01-01T00:00:00.000Z"
    else:
        evts = [build_event(c, typed=False, kind="track" if kind == "t" else kind)]
        doc = evts[0]
    if auth == "body" and isinstance(doc, dict):
        doc["writeKey"] = WRITE_KEY
    shape = c.pick(["json"] * 16 + ["junk", "array", "cut", "latin-1"])
    if shape == "json":
        # surrogatepass: a lone surrogate becomes bytes that are not UTF-8
        body = json.dumps(doc, ensure_ascii=c.pick([True, False])).encode("utf-8", "surrogatepass")
    elif shape == "latin-1":
        body = json.dumps(doc, ensure_ascii=False).encode("latin-1", "replace")
        try:  # what is left of the events if it is UTF-8 after all ("?" for the lost ones)
            back = json.loads(body.decode("utf-8"))
            evts = back["batch"] if kind in ("batch", "b") else [back]
        except ValueError:
            evts = None
    elif shape == "array":
        body, evts = json.dumps([doc]).encode(), None
    elif shape == "cut":
        raw = json.dumps(doc).encode()
        body, evts = raw[: c.integer(0, max(len(raw) - 1, 0))], None
    else:
        body, evts = c.binary(40), None
    coding = c.pick(["none"] * 12 + ["gzip", "gzip", "gzip-junk", "br"])
    if coding == "gzip":
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body)
    elif coding == "gzip-junk":
        headers["Content-Encoding"] = "gzip"
        body = body[:20]
    elif coding == "br":
        headers["Content-Encoding"] = "br"
    return Request(f"/v1/{kind}", body, headers, evts)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """Hypothesis' strategy of :func:`build_request`."""
    return build_request(Drawn(draw))
