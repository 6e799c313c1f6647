"""The token that guards the worker's operator endpoints (``DEDUPE_WEB_TOKEN``).

``/``, ``/stats``, ``/metrics``, ``/messages/{id}`` and ``/producers/{name}`` show what the
pipeline holds and does (ids, when they were seen, where their copy went, producers' names); with
a token set they answer 401 unless the request carries it, as ``Authorization: Bearer <token>``
(Prometheus's ``authorization``, scripts) or as the password of HTTP Basic authentication (any
user name: browsers ask for it once and send it with the status page's own requests, and
Prometheus's ``basic_auth`` works too). ``/health`` and ``/ready`` stay open for probes. A
lookup forwarded to the worker owning the id keeps the request's headers (Faust's router), so
every worker of a group needs the same token.
"""

from __future__ import annotations

from typing import Any

from faust.web import Response, View

from envsettings.tokens import allowed

REALM = 'Basic realm="dedupe worker", charset="UTF-8"'


class Guarded(View):  # type: ignore[misc]
    """A view that answers 401 to a request without the worker's token."""

    token = ""

    async def dispatch(self, request: Any) -> Any:
        if allowed(self.token, request.headers.get("Authorization")):
            return await super().dispatch(request)
        refusal: Response = self.json(
            {
                "error": "this endpoint needs the worker's token (DEDUPE_WEB_TOKEN): send "
                "'Authorization: Bearer <token>', or it as the password of Basic auth"
            },
            status=401,
            headers={"WWW-Authenticate": REALM},
        )
        return refusal


def guarded(token: str) -> type[Guarded]:
    """The base class of the guarded views of a worker with ``token``."""
    return type("GuardedView", (Guarded,), {"token": token})


__all__ = ["Guarded", "guarded"]
