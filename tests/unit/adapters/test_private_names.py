"""Every private (or undocumented) name of Faust, mode and aiokafka that the worker relies on,
checked against the installed versions: a version bump that renames one fails here in seconds,
not in the fault tier. When one fails, the comment beside it says which of our modules uses
it; fix that module, then the list. Each library's are listed in its adapter module,
``adapters/faust_privates.py`` (``FAUST_PRIVATES``, Faust's and mode's) and
``adapters/aiokafka_privates.py`` (``PRIVATE_NAMES``), with the files that use each member; the
underscored ones are named in that module only: any other module of the repository that names
one, or a class of ours that defines or reads a private member of its library base, fails
here."""

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

from adapters.aiokafka_privates import HERE as AIOKAFKA_HERE
from adapters.aiokafka_privates import PRIVATE_NAMES
from adapters.faust_privates import FAUST_PRIVATES, HERE

REPO = Path(__file__).resolve().parents[3]


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


FAUST_LIBS, AIOKAFKA_LIBS = ("faust", "mode"), ("aiokafka",)


def from_library(cls: type, libraries: tuple[str, ...]) -> bool:
    return cls.__module__.split(".")[0] in libraries


def faust_privates_of(cls: type, libraries: tuple[str, ...] = FAUST_LIBS) -> list[str]:
    """The private members of ``cls``'s base from ``libraries`` that a class of app/,
    recovery/ or tables/ in ``cls``'s MRO defines or reads (through the adapters' shims:
    none)."""
    bases = [k for k in inspect.getmro(cls) if from_library(k, libraries)]
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


@pytest.mark.parametrize("libraries", [FAUST_LIBS, AIOKAFKA_LIBS], ids=["faust", "aiokafka"])
def test_no_class_of_ours_reaches_a_library_private_but_through_the_adapter(
    libraries: tuple[str, ...],
) -> None:
    found = {}
    for name in OUR_MODULES:
        for cls in vars(importlib.import_module(name)).values():
            if (
                inspect.isclass(cls)
                and cls.__module__ == name
                and (uses := faust_privates_of(cls, libraries))
            ):
                found[f"{name}.{cls.__qualname__}"] = uses
    assert found == {}


def test_the_class_check_finds_a_faust_private() -> None:
    class Overrides(faust.Table):  # type: ignore[misc]
        def _new_store(self) -> None:
            self._store = None

    assert faust_privates_of(Overrides) == ["_new_store", "_store"]


AIOKAFKA_UNDERSCORED = sorted({name for _, name, _ in PRIVATE_NAMES if name.startswith("_")})


@pytest.mark.parametrize("name", AIOKAFKA_UNDERSCORED)
def test_aiokafkas_privates_are_named_only_in_the_adapter(name: str) -> None:
    named = files_naming(name)
    assert named <= {AIOKAFKA_HERE}, f"aiokafka's {name} named outside {AIOKAFKA_HERE}"
    assert named, f"aiokafka's {name} is listed but no module names it: drop it from the list"


def test_the_class_check_finds_an_aiokafka_private() -> None:
    from aiokafka.producer.sender import Sender

    class Overrides(Sender):  # type: ignore[misc]
        async def _do_txn_commit(self, result: object) -> None:
            await self._message_accumulator.flush_for_commit()

    assert faust_privates_of(Overrides, AIOKAFKA_LIBS) == ["_do_txn_commit", "_message_accumulator"]
