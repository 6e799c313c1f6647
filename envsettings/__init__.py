"""Settings read from the environment: the small base every service's settings class is built
on (the worker's ``app.settings``, ``ingest.settings``, ``spark.settings``).

A settings class is a frozen dataclass whose fields are declared with :func:`setting` (default,
environment variable, meaning); ``from_env`` reads them, converting by the field's type (``int``,
``float`` as a duration such as ``250ms``/``30s``/``28d``, ``Path``, ``str``), and each class
checks its values at start-up, reporting every problem at once.
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


def parse_duration(text: str) -> float:
    """Parse ``"250ms"``, ``"30s"``, ``"15m"``, ``"24h"``, ``"28d"`` or plain seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (use e.g. 250ms, 30s, 15m, 24h, 28d)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass(frozen=True)
class Setting:
    """Documentation of one field: its environment variable and meaning (shown in the README)."""

    env: str
    help: str


def setting(default: T, env: str, help: str) -> T:
    """A settings field: its default, environment variable and documentation."""
    return field(default=default, metadata={"setting": Setting(env, help)})


class EnvSettings:
    """Base of the settings dataclasses (worker, ingest, Spark jobs): fields declared with
    :func:`setting`, read from their environment variables by :meth:`from_env`."""

    #: The error a bad value raises: each entry point catches its own and prints the message.
    error: ClassVar[type[ValueError]] = SettingsError

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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Read every field from its environment variable; unset variables keep their defaults."""
        env = os.environ if environ is None else environ
        converters: dict[str, Callable[[str], Any]] = {
            "int": int,
            "float": parse_duration,
            "Path": Path,
            "str": str,
        }
        values: dict[str, Any] = {}
        for f in fields(cast(Any, cls)):
            doc: Setting = f.metadata["setting"]
            raw = env.get(doc.env)
            if raw is None or raw == "":
                continue
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            try:
                values[f.name] = converters[kind](raw.strip())
            except ValueError as exc:
                raise cls.error(f"{doc.env}={raw!r}: {exc}") from None
        return cls(**values)
