"""The library as a user gets it: the sdist and wheel built and checked, the wheel installed
into a clean virtualenv, ``import *`` with no extras, and the README's example run there
against the test PostgreSQL and broker (``scripts/check_idem_wheel.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.check_idem_wheel import (
    README,
    check,
    example_problems,
    readme_example,
)
from tests.idempotency.conftest import Servers
from tests.support import Broker

pytestmark = pytest.mark.idempotency


def test_the_readme_example_is_a_whole_program() -> None:
    example = readme_example(README.read_text())
    compile(example, "charge_once.py", "exec")  # a syntax error in the README fails here
    assert 'if __name__ == "__main__":' in example and "await store.close()" in example


def test_the_example_check_refuses_a_double_charge() -> None:
    ok = [f"charged order-{n} {100 * n}" for n in range(1, 6)]
    ok += [f"repeat order-{n} -> ch_order-{n}" for n in range(1, 6)] + ["5 charges for 5 orders"]
    assert example_problems(ok) == []
    twice = ["charged order-1 100", *ok]
    assert example_problems(twice) and example_problems(ok[:-1])


def test_wheel_in_a_clean_virtualenv_runs_the_readme_example(
    servers: Servers, broker: Broker, tmp_path: Path, figures: list[str]
) -> None:
    assert check(servers.dsn, broker.bootstrap, tmp_path) == []
    wheel = next((tmp_path / "dist").glob("*.whl")).name
    figures.append(
        f"wheel: {wheel} and its sdist pass twine check; in a clean virtualenv: import * with "
        "no extras, then the README's example: 5 orders sent twice, each charged once"
    )
