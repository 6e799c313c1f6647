"""aiokafka is pinned exactly, and the transactions-v2 flow (app/eos/txn_v2.py) subclasses its
sender, request handlers and transaction state and copies three of its sender methods: a new
release that changes any of them must be read before it runs. Each method's source is hashed
and compared with the hash recorded for the pinned release
(``adapters/aiokafka_privates.py``: ``V2_PINNED_SOURCES``); a change fails here, naming the
method and what our flow does with it."""

from __future__ import annotations

import re
from pathlib import Path

import aiokafka
import pytest

from adapters.aiokafka_privates import V2_PINNED_SOURCES, source_hash

REPO = Path(__file__).resolve().parents[4]


def test_aiokafka_is_pinned_to_the_release_the_hashes_are_of() -> None:
    pin = re.search(r'"aiokafka\[[^\]]*\]==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert pin is not None, "aiokafka must be pinned exactly (==) in pyproject.toml"
    assert aiokafka.__version__ == pin.group(1), (
        f"aiokafka {aiokafka.__version__} is installed, {pin.group(1)} is pinned: "
        "reinstall (make install)"
    )


@pytest.mark.parametrize(
    ("cls", "method", "use", "recorded"),
    V2_PINNED_SOURCES,
    ids=[f"{c.__name__}.{m}" for c, m, _, _ in V2_PINNED_SOURCES],
)
def test_a_method_the_v2_flow_copies_or_overrides_is_unchanged(
    cls: type, method: str, use: str, recorded: str
) -> None:
    assert source_hash(cls, method) == recorded, (
        f"aiokafka {aiokafka.__version__} changed {cls.__module__}.{cls.__qualname__}.{method} "
        f"({use}, app/eos/txn_v2.py): read the new body against ours, then record its hash "
        "in adapters/aiokafka_privates.py"
    )
