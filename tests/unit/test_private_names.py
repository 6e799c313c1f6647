"""Every private (or undocumented) name of Faust, mode and aiokafka that the worker relies on,
checked against the installed versions: a version bump that renames one fails here in seconds,
not in the fault tier. When one fails, the comment beside it says which of our modules uses
it; fix that module, then the list. aiokafka's are listed, and reached, in
``app/eos/aiokafka_privates.py`` (with ``app/eos/txn_v2.py``, whose subclasses override private
steps); no other module of ``app/`` names one (checked below). Faust's list is the Faust
adapter's (``recovery/faust_adapter.py``, ``FAUST_PRIVATES``), with the files that name each
member: a file not listed there that names one of them fails here too."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from faust.tables.recovery import Recovery

from app.eos.aiokafka_privates import PRIVATE_NAMES
from recovery.faust_adapter import FAUST_PRIVATES

REPO = Path(__file__).resolve().parents[2]


def defines(cls: type, name: str) -> bool:
    """``cls`` (or a base) has ``name`` as a class attribute, or assigns ``self.<name>``."""
    if hasattr(cls, name):
        return True
    pattern = re.compile(rf"self\.{re.escape(name)}\b\s*(:[^=\n]*)?=")
    for klass in inspect.getmro(cls):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if pattern.search(source):
            return True
    return False


#: aiokafka's names come from their one home (app/eos/aiokafka_privates.py), Faust's and mode's
#: from theirs (recovery/faust_adapter.py).
USED: list[tuple[type, str, str]] = [
    *PRIVATE_NAMES,
    *((cls, name, where) for cls, name, where in FAUST_PRIVATES),
]


@pytest.mark.parametrize(
    ("cls", "name", "used_in"), USED, ids=[f"{c.__name__}.{n}" for c, n, _ in USED]
)
def test_a_name_the_worker_relies_on_still_exists(cls: type, name: str, used_in: str) -> None:
    assert defines(cls, name), (
        f"{cls.__module__}.{cls.__qualname__}.{name} is gone (used in {used_in})"
    )


def test_the_check_finds_a_missing_name() -> None:
    assert not defines(Recovery, "_no_such_attribute")
    assert defines(Recovery, "_processing_times")  # assigned in __init__, no class attribute


def files_naming(name: str) -> set[str]:
    """The repository's Python files (but the tests) that name ``name`` as an attribute."""
    pattern = re.compile(rf"\.{re.escape(name)}\b|def {re.escape(name)}\b")
    found = set()
    for package in ("app", "recovery", "tables", "scripts", "bench", "spark", "ingest"):
        for path in (REPO / package).rglob("*.py"):
            if pattern.search(path.read_text()):
                found.add(str(path.relative_to(REPO)))
    return found


FAUST_UNDERSCORED = sorted({name for _, name, _ in FAUST_PRIVATES if name.startswith("_")})


@pytest.mark.parametrize("name", FAUST_UNDERSCORED)
def test_fausts_privates_are_named_only_where_the_adapter_says(name: str) -> None:
    allowed = {f.strip() for _, n, where in FAUST_PRIVATES if n == name for f in where.split(",")}
    named = files_naming(name)
    assert named <= allowed, f"Faust's {name} named outside {sorted(allowed)}"
    assert named, f"Faust's {name} is listed but no module names it: drop it from the list"


APP = Path(__file__).resolve().parents[2] / "app"
#: The modules allowed to name aiokafka's private attributes.
AIOKAFKA_HOMES = {APP / "eos" / "aiokafka_privates.py", APP / "eos" / "txn_v2.py"}


def aiokafka_private_uses(text: str) -> list[str]:
    """Each ``<something>._<name>`` in ``text`` whose ``_<name>`` is one of aiokafka's private
    names (an object's own ``self._<name>`` is its own attribute, not aiokafka's)."""
    names = sorted({n for _, n, _ in PRIVATE_NAMES if n.startswith("_")}, key=len, reverse=True)
    pattern = re.compile(r"(?<!\bself)\.(" + "|".join(map(re.escape, names)) + r")\b")
    return [m.group(0) for m in pattern.finditer(text)]


def test_no_module_of_app_but_the_adapter_names_an_aiokafka_private() -> None:
    found = {
        str(path.relative_to(APP.parent)): uses
        for path in sorted(APP.rglob("*.py"))
        if path not in AIOKAFKA_HOMES and (uses := aiokafka_private_uses(path.read_text()))
    }
    assert found == {}


def test_the_adapter_check_finds_a_private_name() -> None:
    assert aiokafka_private_uses("producer._txn_manager.x; self._txn_manager") == ["._txn_manager"]
