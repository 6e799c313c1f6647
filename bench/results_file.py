"""The results file of a benchmark: its latest run only, under a header that says how it was
measured and what it is held to.

Each run rewrites the file, so what a reader finds is one run on one machine, never figures of
different runs or machines side by side; earlier runs are in git history.
"""

from __future__ import annotations

from pathlib import Path

from app.admin.capacity.figures import refresh

KEPT = "Each run rewrites this file; earlier runs are in git history."


def write_latest(path: Path, title: str, method: str, target: str, run: str) -> None:
    """Rewrite ``path``: ``# title``, the method and target paragraphs, then ``run`` (which
    names the command, the machine and the figures)."""
    path.write_text(
        f"# {title}\n\n{KEPT}\n\nMethod: {method}\n\nTarget: {target}\n\n{run.strip()}\n"
    )
    for name in refresh(path):
        print(
            f"app/admin/capacity/figures.json: {name} taken from {path.name} (python -m app plan)"
        )
