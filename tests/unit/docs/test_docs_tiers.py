"""The test tiers and the duration of ``make test`` are said one way everywhere: the README,
docs/testing.md and the Makefile name every tier folder of tests/, the README gives their
number, and both documents give the same duration."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
TESTING = (ROOT / "docs" / "testing.md").read_text()
NUMBERS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]


def tiers() -> list[str]:
    """Folders of tests/ that hold test modules, at any depth (tests/unit mirrors the source
    tree in subfolders): each is a tier with its own target."""
    return sorted(
        d.name for d in (ROOT / "tests").iterdir() if d.is_dir() and any(d.rglob("test_*.py"))
    )


def test_there_are_tiers() -> None:
    assert {"unit", "integration", "faults", "cluster"} <= set(tiers())


def test_the_readme_counts_and_names_every_tier() -> None:
    counted = re.search(r"`make test` runs `make lint` \([^)]*\) and (\w+) tiers", README)
    assert counted, "the README's Tests section no longer says how many tiers make test runs"
    assert counted.group(1) == NUMBERS[len(tiers())], (counted.group(1), tiers())
    for tier in tiers():
        assert f"`tests/{tier}`" in README, tier


def test_the_testing_doc_and_the_makefile_name_every_tier() -> None:
    makefile = (ROOT / "Makefile").read_text()
    intro = TESTING.split("\n## ", 1)[0]
    for tier in tiers():
        assert f"`make test-{tier}`" in intro, tier
        assert f"| `tests/{tier}` |" in TESTING, tier
        assert re.search(rf"^test-{tier}:", makefile, re.M), tier


def test_make_test_takes_as_long_in_the_readme_as_in_the_testing_doc() -> None:
    said = {
        name: re.findall(r"make test\b[^\n]*?\(~(\d+) min\)", text)
        for name, text in (("README.md", README), ("docs/testing.md", TESTING))
    }
    assert all(said.values()), said
    assert len({minutes for found in said.values() for minutes in found}) == 1, said
