"""Settings read from the environment: the small base every service's settings class is built
on (the worker's ``app.settings``, ``ingest.settings``, ``spark.settings``).

A settings class is a frozen dataclass whose fields are declared with :func:`setting` (default,
environment variable, meaning, and optionally the range or the values it accepts); ``from_env``
reads them, converting by the field's type (``int``, ``bool``, ``float`` as a duration such
as ``250ms``/``30s``/``28d``, ``Path``, ``str``). A class calls :meth:`EnvSettings.check` from its
``__post_init__`` with the problems only it can see (values that depend on each other); every
problem, unparsable values included, is reported at once, one line each.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar, cast

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting from the environment is missing or invalid."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


_BOOL = {"true": True, "1": True, "yes": True, "on": True}
_BOOL |= {"false": False, "0": False, "no": False, "off": False}


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off), any case."""
    try:
        return _BOOL[text.strip().lower()]
    except KeyError:
        raise ValueError(f"{text!r} is not true or false") from None


def parse_duration(text: str) -> float:
    """Parse ``"250ms"``, ``"30s"``, ``"15m"``, ``"24h"``, ``"28d"`` or plain seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (use e.g. 250ms, 30s, 15m, 24h, 28d)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


#: The value of a count setting that leaves the choice to the cluster (``parse_count``).
AUTO = "auto"


def parse_count(text: str) -> int | None:
    """``auto`` (None) or a whole number; ValueError otherwise."""
    if text.strip().lower() == AUTO:
        return None
    return int(text)


def count_problem(env: str, text: str, highest: int) -> str | None:
    """What is wrong with a count setting that takes ``auto`` or 1..``highest``, or None."""
    try:
        n = parse_count(text)
    except ValueError:
        return f"{env}={text!r}: use auto or a whole number 1..{highest}"
    if n is not None and not 1 <= n <= highest:
        return f"{env}={n}: must be auto or 1..{highest}"
    return None


def _size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _duration(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


@dataclass(frozen=True)
class Setting:
    """One field: its environment variable, meaning (shown in docs/settings.md) and the values
    it accepts: ``within`` (lowest, highest) for numbers, ``one_of`` for words (exactly)."""

    env: str
    help: str
    within: tuple[float, float] | None = None
    one_of: tuple[str, ...] | None = None

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with ``value`` for this field, or None."""
        if self.within is not None:
            low, high = self.within
            if not low <= value <= high:
                if isinstance(value, float):
                    shown, lo, hi = _duration(value), _duration(low), _duration(high)
                elif name.endswith("bytes"):
                    shown, lo, hi = str(value), _size(int(low)), _size(int(high))
                else:
                    shown, lo, hi = str(value), f"{low:g}", f"{high:g}"
                return f"{self.env}={shown}: must be {lo}..{hi}"
        if self.one_of is not None and value not in self.one_of:
            return f"{self.env}={value!r}: use one of {', '.join(self.one_of)}"
        return None

    def accepts(self, name: str, kind: str) -> str:
        """The accepted values in words, for the settings tables ('' when any)."""
        if self.within is not None:
            low, high = self.within
            if kind == "float":
                return f"{_duration(low)}..{_duration(high)}"
            if name.endswith("bytes"):
                return f"{_size(int(low))}..{_size(int(high))}"
            return f"{low:g}..{high:g}"
        if self.one_of is not None:
            return ", ".join(self.one_of)
        return ""


def setting(
    default: T,
    env: str,
    help: str,
    *,
    within: tuple[float, float] | None = None,
    one_of: tuple[str, ...] | None = None,
) -> T:
    """A settings field: its default, environment variable, documentation and accepted values."""
    return field(default=default, metadata={"setting": Setting(env, help, within, one_of)})


def secret(default: str, env: str, help: str) -> str:
    """A settings field left out of the settings' repr, so a password or token never reaches
    a log line that prints the settings."""
    return field(default=default, repr=False, metadata={"setting": Setting(env, help)})


def _problems(exc: ValueError) -> list[str]:
    """The problems an error of :meth:`EnvSettings.check` lists (or its message)."""
    listed: list[str] | None = getattr(exc, "problems", None)
    return listed if listed is not None else [str(exc)]


class EnvSettings:
    """Base of the settings dataclasses (worker, ingest, Spark jobs): fields declared with
    :func:`setting`, read from their environment variables by :meth:`from_env`."""

    #: The error a bad value raises: each entry point catches its own and prints the message.
    error: ClassVar[type[ValueError]] = SettingsError

    @classmethod
    def env_of(cls, name: str) -> str:
        """The environment variable of field ``name``: what a problem's message names."""
        return cls.describe(name).env

    @classmethod
    def describe(cls, name: str) -> Setting:
        """The documentation of field ``name``."""
        for f in fields(cast(Any, cls)):
            if f.name == name:
                doc: Setting = f.metadata["setting"]
                return doc
        raise KeyError(name)

    @classmethod
    def documented(cls) -> list[tuple[str, str, Setting]]:
        """(field, default, doc) for every field, in declaration order (used by the README)."""
        return [(f.name, str(f.default), f.metadata["setting"]) for f in fields(cast(Any, cls))]

    def check(self, problems: list[str]) -> None:
        """Raise :attr:`error` listing ``problems`` and every value outside its field's range
        or choices, one per line; nothing when there are none."""
        out = [
            problem
            for f in fields(cast(Any, self))
            if (problem := f.metadata["setting"].problem(f.name, getattr(self, f.name)))
        ]
        out += problems
        if out:
            error = self.error("invalid settings:\n  " + "\n  ".join(out))
            error.problems = out  # type: ignore[attr-defined]
            raise error

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Read every field from its environment variable; unset variables keep their defaults.
        Raises :attr:`error` naming every unparsable variable and every invalid value."""
        env = os.environ if environ is None else environ
        converters: dict[str, Callable[[str], Any]] = {
            "int": int,
            "bool": parse_bool,
            "float": parse_duration,
            "Path": Path,
            "str": str,
        }
        values: dict[str, Any] = {}
        unparsable: list[str] = []
        for f in fields(cast(Any, cls)):
            doc: Setting = f.metadata["setting"]
            raw = env.get(doc.env)
            if raw is None or raw == "":
                continue
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            try:
                values[f.name] = converters[kind](raw.strip())
            except ValueError as exc:
                unparsable.append(f"{doc.env}={raw!r}: {exc}")
        try:
            made = cls(**values)
        except ValueError as exc:
            if not unparsable:
                raise
            unparsable += _problems(exc)
        if unparsable:
            error = cls.error("invalid settings:\n  " + "\n  ".join(unparsable))
            error.problems = unparsable  # type: ignore[attr-defined]
            raise error from None
        return made
