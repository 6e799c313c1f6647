"""Generated ingest requests (Hypothesis strategies), shared by the property test in-process
(``test_fuzz_requests.py``) and the 10,000-request run against the real service
(``test_fuzz_requests_http.py``)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.ingest.support import WRITE_KEY, basic

KINDS = ["batch", "track", "identify", "page", "screen", "group", "alias", "t", "b", "nope"]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
ids = st.text(min_size=1, max_size=12) | st.sampled_from(["", 0, 7, True, None]) | json_values
message_ids = (
    st.uuids().map(str)
    | st.text(max_size=12)
    | st.text(alphabet="é€", min_size=120, max_size=140)  # past the 256-byte limit
    | st.sampled_from(["\ud800x", 5, None])
)


@st.composite
def events(draw: st.DrawFn, typed: bool) -> dict[str, Any]:
    """A Segment event, often valid, often missing or breaking one rule."""
    kind = draw(st.sampled_from(["track", "identify", "page", "screen", "group", "alias"]))
    event: dict[str, Any] = {}
    if typed:
        event["type"] = draw(st.sampled_from([kind, kind, kind, "bogus", 3]))
    if draw(st.integers(0, 9)):
        event["userId"] = draw(st.text(min_size=1, max_size=8))
    else:
        event["anonymousId"] = draw(ids)
    event.update(
        draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "event": st.sampled_from(["Order Completed", ""]) | json_scalars,
                    "groupId": ids,
                    "previousId": ids,
                    "properties": json_values,
                    "context": json_values,
                    "timestamp": st.text(max_size=25),
                    "writeKey": st.sampled_from([WRITE_KEY, "other"]),
                },
            )
        )
    )
    if draw(st.integers(0, 3)):
        event["messageId"] = draw(message_ids)
    if kind == "track" and draw(st.integers(0, 5)):
        event.setdefault("event", "Product Viewed")
    return event


@dataclass
class Request:
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    #: The events as sent (None: the body is not a JSON document of events).
    events: list[dict[str, Any]] | None = None


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """A request to /v1/<kind>: mostly well-formed JSON, sometimes broken in its headers
    (content type, charset, coding, key) or its body (not JSON, not an object, gzip junk)."""
    kind = draw(st.sampled_from(KINDS))
    headers: dict[str, str] = {}
    content_type = draw(
        st.sampled_from(
            ["application/json"] * 6
            + ["text/plain", "application/json; charset=latin-1", "text/html", ""]
        )
    )
    if content_type:
        headers["Content-Type"] = content_type
    auth = draw(st.sampled_from(["header"] * 6 + ["wrong", "body", "none"]))
    if auth == "header":
        headers["Authorization"] = basic(WRITE_KEY)
    elif auth == "wrong":
        headers["Authorization"] = basic("not-a-key")
    evts: list[dict[str, Any]] | None
    if kind in ("batch", "b"):
        evts = draw(st.lists(events(typed=True), min_size=0, max_size=6))
        doc: Any = {"batch": evts}
        if draw(st.booleans()):
            doc["context"] = {"library": {"name": "fuzz"}}
        if draw(st.booleans()):
            doc["sentAt"] = "2030-01-01T00:00:00.000Z"
    else:
        evts = [draw(events(typed=False))]
        doc = evts[0]
    if auth == "body" and isinstance(doc, dict):
        doc["writeKey"] = WRITE_KEY
    shape = draw(st.sampled_from(["json"] * 8 + ["junk", "array", "cut"]))
    if shape == "json":
        body = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    elif shape == "array":
        body, evts = json.dumps([doc]).encode(), None
    elif shape == "cut":
        raw = json.dumps(doc).encode()
        body, evts = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))], None
    else:
        body, evts = draw(st.binary(max_size=40)), None
    coding = draw(st.sampled_from(["none"] * 6 + ["gzip", "gzip-junk", "br"]))
    if coding == "gzip":
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body)
    elif coding == "gzip-junk":
        headers["Content-Encoding"] = "gzip"
        body = body[:20]
    elif coding == "br":
        headers["Content-Encoding"] = "br"
    return Request(f"/v1/{kind}", body, headers, evts)
