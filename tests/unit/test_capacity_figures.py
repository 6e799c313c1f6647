"""Every figure the sizing tool uses is the one its benchmark's results file holds: a rerun that
moves a figure fails here until app/capacity/figures.json follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.capacity.figures import ROOT, load, read_cited

FIGURES = load()


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_the_figure_is_the_one_its_results_file_holds(name: str) -> None:
    figure = FIGURES[name]
    assert (ROOT / figure.source["file"]).is_file(), figure.cited
    assert read_cited(figure.source) == figure.value, f"{name}: see {figure.cited}"


def test_a_changed_row_no_longer_matches(tmp_path: Path) -> None:
    (tmp_path / "r.md").write_text(
        "# x\n\n## Profile a\n\n| run | rate | mem |\n|---|---|---|\n| bulk | 1,500 | 3 / 4 |\n"
        "\n## Profile b\n\n| run | rate | mem |\n|---|---|---|\n| bulk | 2,500 (x) | 5 |\n"
        "\n- the changelog on disk (zstd): 32.5 bytes per id\n"
    )
    row = {"file": "r.md", "row": "bulk", "column": "rate"}
    assert read_cited(row, tmp_path) == 1500
    assert read_cited({**row, "section": "## Profile b"}, tmp_path) == 2500
    assert read_cited({**row, "column": "mem", "take": "last"}, tmp_path) == 4
    assert read_cited({"file": "r.md", "bullet": "the changelog on disk"}, tmp_path) == 32.5
    with pytest.raises(LookupError):
        read_cited({**row, "row": "gone"}, tmp_path)
    with pytest.raises(LookupError):
        read_cited({"file": "r.md", "bullet": "nothing"}, tmp_path)
