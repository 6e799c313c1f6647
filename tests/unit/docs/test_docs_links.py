"""Every relative link in README.md and docs/*.md leads somewhere: to a file or folder of the
repository, and when it names an anchor, to a heading of that file (GitHub's heading ids).
A file moved or a heading renamed breaks the link a reader follows; this test names it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: ``[text](target)`` and ``[text](target "title")``; images (``![..](..)``) too.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(path: Path, code: bool = False) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, inline code removed (a link shown as code is not one;
    a code span may run over a line break), or with ``code`` kept as text (a heading's id
    includes it). Numbered as in the file."""
    kept: list[str] = []
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            kept.append("")
        else:
            kept.append("" if fenced else line)
    text = "\n".join(kept)
    if code:
        text = text.replace("`", "")
    else:
        text = INLINE_CODE.sub(lambda span: "\n" * span.group().count("\n"), text)
    return list(enumerate(text.split("\n"), 1))


def heading_ids(path: Path) -> set[str]:
    """The ids GitHub gives the headings of ``path``: lower case, punctuation dropped, spaces
    as hyphens, ``-1``, ``-2`` ... for repeats; plus explicit ``<a id>`` / ``<a name>``."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path, code=True):
        ids.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def relative_links(path: Path) -> list[tuple[int, str]]:
    return [
        (number, target)
        for number, line in prose_lines(path)
        for target in LINK.findall(line)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)  # http:, mailto: ...
    ]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_ids(resolved):
            broken.append(f"{where} (no such heading in {resolved.relative_to(root)})")
    return broken


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    broken = [line for path in DOCS for line in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_links_and_headings() -> None:
    """The check above would pass on documents it failed to read: it must find the README's
    links to docs/ and the headings they point at."""
    readme = [target for _, target in relative_links(ROOT / "README.md")]
    assert "docs/testing.md" in readme
    assert any("#" in target for path in DOCS for _, target in relative_links(path))
    assert "production-checklist" in heading_ids(ROOT / "docs" / "operations.md")


def test_heading_ids_follow_githubs_rules(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Fetches wait at most `DEDUPE_FETCH_MAX_WAIT`\n"
        "## Notes\n"
        "## Notes\n"
        "```\n# not a heading\n```\n"
        "### C1-C8: three brokers (`make test-cluster`)\n"
    )
    assert heading_ids(doc) == {
        "fetches-wait-at-most-dedupe_fetch_max_wait",
        "notes",
        "notes-1",
        "c1-c8-three-brokers-make-test-cluster",
    }
    doc.write_text(
        "## Notes\n[a](missing.md) [b](doc.md#notes) [c](#nowhere) `[d](code.md)`\n"
        "`a span\nover two lines` [e](../up.md) [f](https://example.com/x.md)\n"
    )
    assert [line.split(": ", 1)[1] for line in broken_links(doc, tmp_path)] == [
        "missing.md (no such file)",
        "#nowhere (no such heading in doc.md)",
        "../up.md (no such file)",
    ]
