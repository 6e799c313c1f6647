"""The images install from lock files that match pyproject.toml, and the image tier knows
every step of docker/Dockerfile.

The lock files (docker/requirements-app.txt, docker/requirements-spark.txt, written by
``make lock``) pin every package with its hashes; pip installs them with --require-hashes.
A dependency added to or narrowed in pyproject.toml without ``make lock`` would build an
image without it (or with a version outside the range the code was tested on): these tests
name the requirement the lock no longer satisfies.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.image.dockerfile import SKIPPED, instructions, lineage, shell_commands, stages

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCKS = {
    "app": (ROOT / "docker" / "requirements-app.txt", []),
    "spark": (ROOT / "docker" / "requirements-spark.txt", ["spark"]),
}
#: The image's platform: python:3.11-slim on Linux.
IMAGE_ENV = {
    **default_environment(),
    "python_version": "3.11",
    "python_full_version": "3.11.14",
    "sys_platform": "linux",
    "platform_system": "Linux",
}


def pins(lock: Path) -> dict[str, Version]:
    """name -> pinned version, for the entries whose marker holds on the image's platform."""
    found: dict[str, Version] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", lock.read_text()):
        first = entry.split("\\", 1)[0].strip()
        if not first or first.startswith("#"):
            continue
        requirement = Requirement(first)
        assert "--hash=sha256:" in entry, f"{lock.name}: {requirement.name} has no hash"
        if requirement.marker is None or requirement.marker.evaluate(IMAGE_ENV):
            (spec,) = requirement.specifier
            assert spec.operator == "==", f"{lock.name}: {first} is not a pin"
            found[canonicalize_name(requirement.name)] = Version(spec.version)
    return found


@pytest.mark.parametrize("target", sorted(LOCKS))
def test_the_lock_satisfies_every_requirement_of_the_project(target: str) -> None:
    lock, extras = LOCKS[target]
    pinned = pins(lock)
    wanted = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock.name} lacks {requirement}: run make lock"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock.name} pins {name}=={pinned[name]} outside {requirement}: run make lock"
        )


def test_the_spark_image_keeps_the_app_images_versions() -> None:
    """The spark stage installs its lock on top of the app stage's: a package pinned
    differently would be swapped under the worker code the spark image also carries."""
    app, spark = pins(LOCKS["app"][0]), pins(LOCKS["spark"][0])
    assert {n: (v, spark.get(n)) for n, v in app.items() if spark.get(n) != v} == {}


def test_each_stage_installs_its_lock_with_hashes_and_runs_unprivileged() -> None:
    for target, (lock, _) in LOCKS.items():
        own = stages()[target].instructions
        runs = [i.args for i in own if i.keyword == "RUN"]
        relative = lock.relative_to(ROOT)
        assert any(f"--require-hashes -r {relative}" in run for run in runs), target
        users = [i.args for i in own if i.keyword == "USER"]
        assert users and users[-1] not in ("root", "0", "0:0"), f"{target} ends as root"


def test_the_native_stage_builds_with_the_backend_native_declares_from_its_lock() -> None:
    """The native stage installs maturin from docker/requirements-native.txt (hashes checked)
    and the app stage takes the wheel from it: the lock must pin a maturin inside the range
    native/pyproject.toml's build-system asks for, and the .in file ``make lock`` compiles
    must ask for that range."""
    native = tomllib.loads((ROOT / "native" / "pyproject.toml").read_text())
    (wanted,) = [Requirement(r) for r in native["build-system"]["requires"]]
    lines = (ROOT / "docker" / "requirements-native.in").read_text().splitlines()
    asked = [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]
    assert asked == [wanted], "docker/requirements-native.in must ask for native's backend"
    pinned = pins(ROOT / "docker" / "requirements-native.txt")
    name = canonicalize_name(wanted.name)
    assert name in pinned and wanted.specifier.contains(pinned[name]), "run make lock"
    runs = [i.args for i in stages()["native"].instructions if i.keyword == "RUN"]
    assert any("--require-hashes -r docker/requirements-native.txt" in run for run in runs)
    app = [i.args for i in stages()["app"].instructions if i.keyword == "COPY"]
    assert any(copy.startswith("--from=native ") for copy in app)


def test_the_app_stage_builds_the_project_with_the_locked_backend() -> None:
    """pip builds the project in an isolated environment unless told not to, and fills it with
    whatever setuptools PyPI serves that day: the app stage must build without isolation, on
    the setuptools and wheel its lock pins, inside the range pyproject.toml's build-system asks
    for (docker/requirements-build.in asks for that range; make lock resolves it into the app
    and spark locks)."""
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    wanted = [Requirement(r) for r in build["requires"]]
    lines = (ROOT / "docker" / "requirements-build.in").read_text().splitlines()
    asked = [Requirement(ln) for ln in lines if ln.strip() and not ln.startswith("#")]
    assert sorted(map(str, asked)) == sorted(map(str, wanted)), "requirements-build.in"
    for target in LOCKS:
        pinned = pins(LOCKS[target][0])
        for requirement in wanted:
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"the {target} lock lacks {name}: run make lock"
            assert requirement.specifier.contains(pinned[name]), f"{name}: run make lock"
    runs = [i.args for i in stages()["app"].instructions if i.keyword == "RUN"]
    project = [run for run in runs if run.startswith("pip install") and run.endswith(" .")]
    assert project and all("--no-build-isolation" in run for run in project), project


def test_the_image_tier_knows_every_step_of_the_dockerfile() -> None:
    """tests/image carries out pip and python steps and skips the ones SKIPPED explains; a
    new kind of RUN step must be taught there, not silently left out of the test."""
    known = {"pip", "python", *SKIPPED}
    for target in stages():
        for stage in lineage(target):
            for ins in stage.instructions:
                if ins.keyword == "RUN":
                    for command in shell_commands(ins.args):
                        venv = command[:3] == ["python3", "-m", "venv"]
                        assert command[0] in known or venv, (ins.line, command)


def test_the_dockerfile_parser_joins_continued_lines() -> None:
    parsed = instructions("FROM x AS a\n# note\nRUN a \\\n    && b\nUSER 1:1\n")
    assert [(i.keyword, i.args) for i in parsed] == [
        ("FROM", "x AS a"),
        ("RUN", "a && b"),
        ("USER", "1:1"),
    ]
    assert shell_commands(parsed[1].args) == [["a"], ["b"]]
