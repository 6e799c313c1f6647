"""Decorators that claim before the function runs, so no caller can forget ``claim.done``.

After Powertools' ``idempotent`` and ``idempotent_function`` (aws_lambda_powertools/
utilities/idempotency/idempotency.py, with the handling of its base.py: a repeat returns the
stored result, through ``response_hook`` when one is given; a function that raises deletes
its record so a retry runs again)::

    idem = Idempotency(PostgresStore(dsn), processor="billing")

    @idempotent_function(idem, key="order_id", payload="order")
    async def charge(order_id: str, order: dict) -> str:
        return await payments.charge(order)      # runs once per order_id

    @idempotent(idem)                            # key: record.key, payload: record.value
    async def handle(record) -> str: ...

Each decorated function keeps its records in a namespace of its own, as Powertools prefixes
its keys with the function's name (``BasePersistenceLayer.configure``: ``function_name``):
the processor ``<processor>/<module>.<qualified name>``, so ``refund("o1")`` never answers
with ``charge("o1")``'s result, and nested decorated calls may share an id. ``name=`` sets a
namespace that survives renaming the function (renaming it otherwise starts from no record);
``name=""`` keeps records under the bare processor, as 1.0 did.

``key`` and ``payload`` name a parameter of the function (positional or keyword, unlike
Powertools' keyword-only ``data_keyword_argument``) or are callables given the function's
arguments; on a method, the arguments after ``self`` (or ``cls``), as on a function: the
decorated function is a descriptor that binds like a function (``__get__``), so it knows
when it is called as a method whatever its first parameter is named. ``@staticmethod`` and
``@classmethod`` go above or below it. A key is any id ``Idempotency.claim`` takes (a str,
UTF-8 bytes, an int, a UUID ...: ``check_event_id``; ``1`` and ``"1"`` are two keys). The
decorated function is async with ``Idempotency`` and sync with ``SyncIdempotency``. A repeat
returns the first run's result as the serializer gives it back (JSON by default: a tuple
comes back a list), or what ``on_repeat(repeat)`` returns (``repeat``: a :class:`Repeat`, as
``IdempotentConsumer`` gives its hook; 1.0's ``on_repeat(result, claim)`` still works, with a
``DeprecationWarning``); a repeat of a call that raised an error of ``store_errors`` calls
the hook too, then raises that error again.

``IDEMPOTENT_CONSUMER_DISABLED=1`` (as Powertools' ``POWERTOOLS_IDEMPOTENCY_DISABLED``; also
true, yes, on) calls the functions directly, with an ``IdempotencyDisabledWarning``: for
tests of the business logic, never for production. Read on every call, so a test can set it
with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from ._base import InvalidEventId, StoredError
from ._core import Idempotency
from ._shared import Repeat, answer_repeat, repeat_hook
from ._sync import SyncClaim, SyncIdempotency

F = TypeVar("F", bound=Callable[..., Any])

DISABLED_ENV = "IDEMPOTENT_CONSUMER_DISABLED"
_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"", "0", "false", "no", "off", "n", "f"}

Extractor = str | Callable[..., Any]
#: ``on_repeat(repeat: Repeat) -> answer`` (1.0's ``on_repeat(result, claim)``: deprecated)
OnRepeat = Callable[[Repeat], Any] | Callable[[Any, Any], Any]
Hook = Callable[[Repeat], Any]
#: What a decorated call runs: (the owner bound by a method call, or (); the arguments after
#: it; the keyword arguments)
Call = Callable[[tuple[Any, ...], tuple[Any, ...], dict[str, Any]], Any]
#: A key or payload read from a call, given the same three
Extract = Callable[[tuple[Any, ...], tuple[Any, ...], dict[str, Any]], Any]


class IdempotencyDisabledWarning(UserWarning):
    """Idempotency is switched off by ``IDEMPOTENT_CONSUMER_DISABLED``: effects run on every
    call, repeats included. For tests only."""


def disabled() -> bool:
    """Is ``IDEMPOTENT_CONSUMER_DISABLED`` set to a true value? Anything but a boolean word
    raises, so a typo never leaves a test running with idempotency on by surprise."""
    value = os.environ.get(DISABLED_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{DISABLED_ENV}={value!r}: use 1/true/yes/on or 0/false/no/off")


def _warn_disabled() -> None:
    warnings.warn(
        f"{DISABLED_ENV} is set: idempotency is off and every call runs its effect "
        "(meant for tests, never for production)",
        IdempotencyDisabledWarning,
        stacklevel=4,  # the caller of the decorated function (through its call)
    )


def namespace(fn: Callable[..., Any], name: str | None) -> str:
    """The namespace of ``fn``'s records: ``name``, or ``<module>.<qualified name>``."""
    return f"{fn.__module__}.{fn.__qualname__}" if name is None else name


def _extractor(spec: Extractor, signature: inspect.Signature, what: str) -> Extract:
    """The key or payload of a call. A callable gets the arguments after the owner (a
    method's ``self`` or ``cls``), as a function's; a parameter's name is looked up in the
    whole call, owner included, as the function's signature names it."""
    if callable(spec):
        extract = spec
        return lambda owner, args, kwargs: extract(*args, **kwargs)
    if spec not in signature.parameters:
        raise TypeError(f"{what}={spec!r} is not a parameter of the function {signature}")

    def argument(owner: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        bound = signature.bind(*owner, *args, **kwargs)
        bound.apply_defaults()
        return bound.arguments[spec]

    return argument


def _through_classmethod(decorated: object, args: tuple[Any, ...]) -> bool:
    """Is this plain call a ``classmethod`` wrapped around ``decorated`` calling it with its
    class first? Up to Python 3.12 a classmethod binds through the object's ``__get__``;
    from 3.13 it calls the object with the class as its first argument, which would then
    reach the key and payload callables. Told by identity, never by a parameter's name:
    the class holds this very object under a classmethod."""
    first = args[0] if args else None
    if not isinstance(first, type):
        return False
    return any(
        isinstance(value, classmethod) and value.__func__ is decorated
        for klass in first.__mro__
        for value in vars(klass).values()
    )


class _Decorated:
    """A decorated function. Called as it is, the call is a function's; read from a class or
    an instance it binds as functions do (``__get__``), so a method call is known as one
    and its owner kept apart from the arguments the key and payload see."""

    def __init__(self, fn: Callable[..., Any], call: Call, method: Callable[..., Any]) -> None:
        functools.update_wrapper(self, fn)
        self._qualname: str = fn.__qualname__
        self._call = call
        self._method = method
        # Function-like, as inspect tells a compiled function (``__code__``, ``__defaults__``,
        # ``__kwdefaults__``): ``inspect.iscoroutinefunction`` then answers for an async
        # function as for the function it wraps, and frameworks that choose between
        # awaiting a callable and running it in a thread by it choose right.
        self.__code__ = method.__code__
        self.__defaults__ = None
        self.__kwdefaults__ = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owned = 1 if _through_classmethod(self, args) else 0
        return self._call(args[:owned], args[owned:], kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> Callable[..., Any]:
        if instance is None:  # read from the class: Class.method(obj, ...) passes the owner
            return self._method
        return types.MethodType(self._method, instance)

    def __reduce__(self) -> str:
        # pickled by reference, as the function it replaces was
        return self._qualname

    def __repr__(self) -> str:
        return f"<idempotent {self.__module__}.{self._qualname}>"


class _AsyncDecorated(_Decorated):
    """A decorated async function (its call is a coroutine function)."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owned = 1 if _through_classmethod(self, args) else 0
        return await self._call(args[:owned], args[owned:], kwargs)


def idempotent_function(
    idem: Idempotency | SyncIdempotency,
    *,
    key: Extractor,
    payload: Extractor | None = None,
    wait: bool | timedelta = True,
    on_repeat: OnRepeat | None = None,
    name: str | None = None,
    store_errors: tuple[type[Exception], ...] = (),
    _record: Extract | None = None,
) -> Callable[[F], F]:
    """Run the decorated function once per key (in its namespace); a repeat returns the first
    run's result without calling it.

    ``key``: the event id (a parameter's name, or a callable of the arguments; on a method,
    the arguments after ``self``/``cls``, as on a function). ``payload``: hashed and
    compared with the first call's (``PayloadMismatch``); None: no check. ``wait``: as
    ``claim``'s (default True: a repeat arriving while the first call runs waits for its
    result). ``name``: the namespace of the function's records (default ``<module>.<qualified
    name>``; ``""``: the bare processor, as in 1.0).

    ``store_errors``: exception classes that are a final answer (a declined payment), kept
    as the call's result as Stripe keeps a failed request's answer: the call raises it, and
    a repeat raises it again (its class built again from its arguments; ``StoredError`` if
    that fails) without running the function. Any other exception releases the claim and a
    retry runs again, except a timeout (``unknown_outcome`` of the ``Idempotency``), which
    keeps it until its lease ends.

    ``on_repeat(repeat)`` is called on every repeat with a :class:`Repeat` (the stored
    ``result``, ``event_id``, ``attempts``, ``claim``, ``failed``; ``record`` under
    ``@idempotent``), awaited if it returns an awaitable, as ``IdempotentConsumer`` calls
    it. The repeat answers as the first call did: what the hook returns is what the call
    returns, and for a repeat of a call that raised an error of ``store_errors``
    (``repeat.failed``) the call raises that error again once the hook has run, whatever
    the hook returned; a hook that raises raises instead. So a hook written for results
    (``return repeat.result``, a log line returning None) can never turn a declined
    payment into a return value that reads as a success, and a hook can still count,
    log or answer declines in its own way by raising. 1.0's ``on_repeat(result, claim)``
    still works, with a ``DeprecationWarning``.

    Above or below ``@staticmethod`` / ``@classmethod``: either order works.
    """

    hook = repeat_hook(on_repeat, _legacy_hook, "(result, claim)")

    def decorate(fn: F) -> F:
        if isinstance(fn, staticmethod | classmethod):
            # Below the staticmethod / classmethod: decorate its function, wrap it again.
            wrapper = type(fn)
            return cast(F, wrapper(decorate(fn.__func__)))
        signature = inspect.signature(fn)
        key_of = _extractor(key, signature, "key")
        payload_of = _extractor(payload, signature, "payload") if payload is not None else None
        scope = namespace(fn, name)

        def claim_args(
            owner: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[Any, Any]:
            data = payload_of(owner, args, kwargs) if payload_of else None
            return key_of(owner, args, kwargs), data

        if inspect.iscoroutinefunction(fn):
            if not isinstance(idem, Idempotency):
                raise TypeError(f"{fn.__qualname__} is async: decorate it with an Idempotency")
            aidem = idem.scoped(scope) if scope else idem

            async def call_async(
                owner: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> Any:
                if disabled():
                    _warn_disabled()
                    return await fn(*owner, *args, **kwargs)
                event_id, data = claim_args(owner, args, kwargs)
                async with aidem.claim(event_id, payload=data, wait=wait) as claim:
                    if claim.done:
                        record = _record(owner, args, kwargs) if _record else None
                        answer = await answer_repeat(hook, claim, record)
                        if claim.failed:
                            raise rebuilt(claim.result, store_errors)
                        return answer
                    try:
                        result = await fn(*owner, *args, **kwargs)
                    except store_errors as error:
                        claim.complete_error(described(error))
                        refused = error
                    else:
                        claim.complete(result)
                        return result
                raise refused

            async def method_async(owner: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await call_async((owner,), args, kwargs)

            functools.update_wrapper(method_async, fn)
            return cast(F, _AsyncDecorated(fn, call_async, method_async))

        if not isinstance(idem, SyncIdempotency):
            raise TypeError(f"{fn.__qualname__} is not async: decorate it with a SyncIdempotency")
        sidem = idem.scoped(scope) if scope else idem

        def call(owner: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if disabled():
                _warn_disabled()
                return fn(*owner, *args, **kwargs)
            event_id, data = claim_args(owner, args, kwargs)
            with sidem.claim(event_id, payload=data, wait=wait) as claim:
                if claim.done:
                    record = _record(owner, args, kwargs) if _record else None
                    answer = _repeat(hook, claim, record)
                    if claim.failed:
                        raise rebuilt(claim.result, store_errors)
                    return answer
                try:
                    result = fn(*owner, *args, **kwargs)
                except store_errors as error:
                    claim.complete_error(described(error))
                    refused = error
                else:
                    claim.complete(result)
                    return result
            raise refused

        def method(owner: Any, /, *args: Any, **kwargs: Any) -> Any:
            return call((owner,), args, kwargs)

        functools.update_wrapper(method, fn)
        return cast(F, _Decorated(fn, call, method))

    return decorate


def _class_name(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def described(error: Exception) -> dict[str, Any]:
    """An error kept by ``store_errors``, as stored: its class and its arguments (as text
    when they are not JSON scalars)."""
    arguments = [
        a if a is None or isinstance(a, str | int | float | bool) else str(a) for a in error.args
    ]
    return {"error": _class_name(type(error)), "args": arguments}


def rebuilt(stored: Any, store_errors: tuple[type[Exception], ...]) -> Exception:
    """The error a first run stored, built again for a repeat to raise."""
    name = stored.get("error") if isinstance(stored, dict) else None
    arguments = stored.get("args") if isinstance(stored, dict) else None
    if not isinstance(arguments, list):
        arguments = []
    for kind in store_errors:
        if _class_name(kind) == name:
            try:
                return kind(*arguments)
            except Exception:
                break
    return StoredError(str(name), arguments)


def _legacy_hook(hook: Callable[..., Any], repeat: Repeat) -> Any:
    return hook(repeat.result, repeat.claim)


def _repeat(hook: Hook | None, claim: SyncClaim, record: Any) -> Any:
    return claim.result if hook is None else hook(Repeat.of(claim, record))


def record_key(record: Any, *args: Any, **kwargs: Any) -> str:
    """The event id of a Kafka record (aiokafka's ``ConsumerRecord``, or anything with a
    ``key``): its key, as the pipeline keys records by messageId."""
    key = getattr(record, "key", None)
    if key is None:
        raise InvalidEventId(
            "the record has no key: the event id must come from the producer "
            "(use idempotent_function with key= to read it from elsewhere)"
        )
    # Its text, as IdempotentConsumer's key_as_id reads it: a record handled by both (or
    # moved from one to the other) keeps one id, whatever the key deserializer made of it.
    return key.decode() if isinstance(key, bytes) else str(key)


def record_value(record: Any, *args: Any, **kwargs: Any) -> object:
    """The payload of a Kafka record: its value, as sent."""
    return getattr(record, "value", None)


def idempotent(
    idem: Idempotency | SyncIdempotency,
    *,
    key: Extractor = record_key,
    payload: Extractor | None = record_value,
    wait: bool | timedelta = True,
    on_repeat: OnRepeat | None = None,
    name: str | None = None,
    store_errors: tuple[type[Exception], ...] = (),
) -> Callable[[F], F]:
    """``idempotent_function`` for handlers whose first argument is a Kafka record (after
    ``self`` or ``cls`` on a method, whatever they are named): keyed by the record's key,
    its value hashed (as Powertools' ``idempotent`` is for the Lambda handler's event)."""

    def decorate(fn: F) -> F:
        inner = fn.__func__ if isinstance(fn, staticmethod | classmethod) else fn
        signature = inspect.signature(inner)
        names = list(signature.parameters)

        def record_of(owner: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            """The record: the first argument after the owner, positional or keyword."""
            if args:
                return args[0]
            at = len(owner)
            return kwargs.get(names[at]) if len(names) > at else None

        return idempotent_function(
            idem,
            key=key,
            payload=payload,
            wait=wait,
            on_repeat=on_repeat,
            name=name,
            store_errors=store_errors,
            _record=record_of,
        )(fn)

    return decorate
