"""``import tables`` must be this repository's package, not PyTables (also named ``tables``)."""

from __future__ import annotations

from pathlib import Path

import tables
import tables.store

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_tables_is_the_repository_package() -> None:
    assert (REPO_ROOT / "pyproject.toml").is_file()
    assert Path(tables.__file__).resolve().is_relative_to(REPO_ROOT)
    assert Path(tables.__file__).resolve() == REPO_ROOT / "tables" / "__init__.py"


def test_tables_store_is_the_transactional_store() -> None:
    assert Path(tables.store.__file__).resolve() == REPO_ROOT / "tables" / "store.py"
    assert hasattr(tables.store, "TransactionalStore")
