"""A benchmark's results file holds its latest run only, under its method and target: a second
run replaces the first, and the committed files are in that form."""

from __future__ import annotations

from pathlib import Path

from bench import age_out, decode, idempotency, recovery, scale
from bench.results_file import KEPT, write_latest


def test_a_run_replaces_the_one_before(tmp_path: Path) -> None:
    path = tmp_path / "results.md"
    write_latest(path, "Title", "how", "what for", "## run one\n\n| a | 1 |\n")
    write_latest(path, "Title", "how", "what for", "## run two\n\n| a | 2 |\n")
    text = path.read_text()
    assert text == (
        f"# Title\n\n{KEPT}\n\nMethod: how\n\nTarget: what for\n\n## run two\n\n| a | 2 |\n"
    )


def test_the_committed_results_files_hold_one_run_each() -> None:
    for module in (age_out, decode, idempotency, recovery, scale):
        text = module.RESULTS.read_text()
        header = f"\n\n{KEPT}\n\nMethod: {module.METHOD}\n\nTarget: {module.TARGET}\n\n## "
        assert header in text, module.RESULTS.name
        assert text.count("\n## ") == 1, f"{module.RESULTS.name} holds more than one run"
