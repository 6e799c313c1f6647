"""Every figure the sizing tool uses is the one its benchmark's results file holds: a rerun that
moves a figure fails here until app/admin/capacity/figures.json follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.admin.capacity.figures import ROOT, load, read_cited, refresh

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


def test_the_sizing_guide_names_every_figure_and_links_its_results_file() -> None:
    """The guide names each figure the tool works from and links the results file that holds
    it; it does not copy the values, which live in bench/ and would go stale in a copy."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Sizing a pipeline", 1)[1].split("\n## ", 1)[0]
    for name, figure in FIGURES.items():
        assert f"`{name}`" in section, f"docs/operations.md, Sizing a pipeline: {name}"
        link = f"(../{figure.source['file']})"
        assert link in section, f"docs/operations.md, Sizing a pipeline: {name} {link}"
        shown = f"{figure.value:,.1f}" if figure.value % 1 or figure.value < 100 else ""
        shown = shown or f"{figure.value:,.0f}"
        assert shown not in section, f"docs/operations.md copies {name}: {shown}"


def test_a_benchmark_that_rewrites_its_results_moves_the_figures_citing_them(
    tmp_path: Path,
) -> None:
    figures = tmp_path / "figures.json"
    figures.write_text(
        '{"figures": {"rate": {"value": 1500, "unit": "u", "meaning": "m", "file": "bench/r.md",'
        ' "row": "bulk", "column": "rate"}, "other": {"value": 7, "unit": "u", "meaning": "m",'
        ' "file": "bench/o.md", "bullet": "x"}}}'
    )
    (tmp_path / "bench").mkdir()
    results = tmp_path / "bench" / "r.md"
    results.write_text("| run | rate |\n|---|---|\n| bulk | 1,500 |\n")
    assert refresh(results, figures, tmp_path) == []
    results.write_text("| run | rate |\n|---|---|\n| bulk | 2,250.5 |\n")
    assert refresh(results, figures, tmp_path) == ["rate"]
    moved = load(figures)
    assert moved["rate"].value == 2250.5 and moved["other"].value == 7
    # a results file outside the repository (a test's) or without the row changes nothing
    assert refresh(tmp_path.parent / "r.md", figures, tmp_path) == []
    results.write_text("| run | rate |\n|---|---|\n| other | 9 |\n")
    assert refresh(results, figures, tmp_path) == []
