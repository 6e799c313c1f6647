"""Every private (or undocumented) name of Faust, mode and aiokafka that the worker relies on,
checked against the installed versions: a version bump that renames one fails here in seconds,
not in the fault tier. When one fails, the comment beside it says which of our modules uses
it; fix that module, then the list. aiokafka's are listed, and reached, in
``app/eos/aiokafka_privates.py`` (with ``app/eos/txn_v2.py``, whose subclasses override private
steps); no other module of ``app/`` names one (checked below). Faust's and mode's are listed in
``adapters/faust_privates.py`` (``FAUST_PRIVATES``), with the files that use each member; the
underscored ones are named in that module only: any other module of the repository that names
one fails here."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import faust
import pytest
from faust.tables.recovery import Recovery

from adapters.faust_privates import FAUST_PRIVATES, HERE
from app.eos.aiokafka_privates import PRIVATE_NAMES

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
#: from theirs (adapters/faust_privates.py).
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


PACKAGES = ("adapters", "app", "recovery", "tables", "scripts", "bench", "spark", "ingest")


def naming(name: str) -> re.Pattern[str]:
    """``name`` as an attribute (``x.name``), a method (``def name``) or a string (``getattr``)."""
    n = re.escape(name)
    return re.compile(rf"\.{n}\b|def {n}\b|[\"']{n}[\"']")


def files_naming(name: str) -> set[str]:
    """The repository's Python files (but the tests) that name ``name``."""
    pattern = naming(name)
    found = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if pattern.search(path.read_text()):
                found.add(str(path.relative_to(REPO)))
    return found


FAUST_UNDERSCORED = sorted({name for _, name, _ in FAUST_PRIVATES if name.startswith("_")})


def test_the_underscored_ones_are_listed_as_the_adapters() -> None:
    assert {where for _, name, where in FAUST_PRIVATES if name.startswith("_")} == {HERE}


@pytest.mark.parametrize("name", FAUST_UNDERSCORED)
def test_fausts_privates_are_named_only_in_the_adapter(name: str) -> None:
    named = files_naming(name)
    assert named <= {HERE}, f"Faust's {name} named outside {HERE}"
    assert named, f"Faust's {name} is listed but no module names it: drop it from the list"


def test_the_scan_finds_each_way_of_naming() -> None:
    found = [bool(naming("_get").search(t)) for t in ("s._get(k)", "def _get(", "'_get'", "_getx")]
    assert found == [True, True, True, False]


def from_faust(cls: type) -> bool:
    return cls.__module__.split(".")[0] in ("faust", "mode")


def faust_privates_of(cls: type) -> list[str]:
    """The private members of ``cls``'s Faust (or mode) base that a class of app/, recovery/
    or tables/ in ``cls``'s MRO defines or reads (through the adapter's shims: none)."""
    bases = [k for k in inspect.getmro(cls) if from_faust(k)]
    ours = [
        k for k in inspect.getmro(cls) if k.__module__ in OUR_MODULES or k.__module__ == __name__
    ]
    names: set[str] = set()
    for klass in ours if bases else []:
        names |= {n for n in vars(klass) if n.startswith("_") and not n.startswith("__")}
        with contextlib.suppress(OSError, TypeError):
            names |= set(re.findall(r"\.(_[A-Za-z]\w*)", inspect.getsource(klass)))
    return sorted(n for n in names - {"_abc_impl"} if defines(bases[0], n))


OUR_MODULES = sorted(
    info.name
    for package in ("app", "recovery", "tables")
    for info in pkgutil.walk_packages([str(REPO / package)], prefix=f"{package}.")
)


def test_no_class_of_ours_reaches_a_faust_private_but_through_the_adapter() -> None:
    found = {}
    for name in OUR_MODULES:
        for cls in vars(importlib.import_module(name)).values():
            if inspect.isclass(cls) and cls.__module__ == name and (uses := faust_privates_of(cls)):
                found[f"{name}.{cls.__qualname__}"] = uses
    assert found == {}


def test_the_class_check_finds_a_faust_private() -> None:
    class Overrides(faust.Table):  # type: ignore[misc]
        def _new_store(self) -> None:
            self._store = None

    assert faust_privates_of(Overrides) == ["_new_store", "_store"]


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
