"""Every name a document gives a reader to type or look for exists: each ``make`` target it shows
is a target of the Makefile; each setting (``DEDUPE_*``, and the ``KAFKA_*`` and ``PORT`` names
the settings classes read) is one a settings class documents, a script, the Makefile or a
benchmark reads, or a test tier's ``DEDUPE_TEST_*``; each ``dedupe_*`` metric, in the docs and in
the alert rules and dashboard, is one the code exports; each repository path shown as code is a
file or folder of the repository. A target, setting, metric or file renamed or removed without
the docs fails here, every offender named at once as ``doc:line: name``.

The documents: README.md, docs/*.md, deploy/**/*.md and the idempotent-consumer library's README,
and the two changelogs (which may also name what a release removed: ``REMOVED``).
docs/reliability.md and docs/soak.md are included: they are reports the fault tiers write
(tests/reliability.py), but their text names only current targets and files. Relative links are
tests/unit/docs/test_docs_links.py's."""

from __future__ import annotations

import importlib
import os
import re
import shlex
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from envsettings import EnvSettings
from spark import metrics as spark_metrics
from tests.unit.docs.test_docs_links import FENCE, INLINE_CODE
from tests.unit.docs.test_metrics_reference import code_registry

ROOT = Path(__file__).resolve().parents[3]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "deploy").rglob("*.md")),
    ROOT / "libs" / "idempotent-consumer" / "README.md",
]
#: The changelogs: besides names that exist they may name what a release removed, each such
#: name listed in ``REMOVED`` (and checked to be gone, so a name that comes back is no longer
#: excused).
CHANGELOGS = [ROOT / "CHANGELOG.md", ROOT / "libs" / "idempotent-consumer" / "CHANGELOG.md"]
REMOVED = {
    "DEDUPE_BULK_RESTORE": "setting",
}
#: Files outside the docs that name metrics a reader (or Prometheus) looks for.
METRIC_FILES = [
    ROOT / "deploy" / "prometheus" / "alerts.yml",
    ROOT / "deploy" / "prometheus" / "alerts_test.yml",
    ROOT / "deploy" / "grafana" / "dedupe.json",
]

#: A name found at a line: (line number, name).
Found = list[tuple[int, str]]


# --- what the documents name -----------------------------------------------------------------


def code_lines(text: str) -> Found:
    """The code of a document, numbered as in the file: each line of a fenced block, and each
    inline code span (at the line it starts on; a span may run over a line break)."""
    out: Found = []
    outside: list[str] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            outside.append("")
        elif fenced:
            out.append((number, line))
            outside.append("")
        else:
            outside.append(line)
    rest = "\n".join(outside)
    for span in INLINE_CODE.finditer(rest):
        out.append((rest.count("\n", 0, span.start()) + 1, span.group()[1:-1]))
    return sorted(out, key=lambda found: found[0])


def all_lines(text: str) -> Found:
    return list(enumerate(text.splitlines(), 1))


TARGET = re.compile(r"[a-z][a-z0-9._-]*")
MAKE_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*=.*", re.S)


def shell_words(code: str) -> list[str]:
    """The words of a command line as the shell splits them (quotes joined, ``&&`` ``;`` ``|``
    ``(`` ``)`` words of their own, comments dropped); plain words when its quotes are open."""
    lexer = shlex.shlex(code, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return code.split()


def make_targets(text: str) -> Found:
    """The targets of every ``make`` command in the code of a document: the words after ``make``
    up to the first that is neither a target nor an option nor a ``NAME=value`` (``make test
    KAFKA_PORT=19093`` names ``test``; ``make bench BENCH_ARGS="--a b"`` names ``bench``)."""
    out: Found = []
    for number, code in code_lines(text):
        words = shell_words(code)
        for at, word in enumerate(words):
            if word != "make":
                continue
            for after in words[at + 1 :]:
                if TARGET.fullmatch(after):
                    out.append((number, after))
                elif not (MAKE_VARIABLE.fullmatch(after) or after.startswith("-")):
                    break
    return out


#: The families of environment names checked: those the settings classes read (``DEDUPE_*``,
#: ``KAFKA_*``, ``PORT``; test_the_checked_families_are_the_settings_classes' keeps this true).
#: A name ending ``_*`` stands for every name it begins.
SETTING = re.compile(r"(?<![\w$.-])(?:(?:DEDUPE|KAFKA)_[A-Z0-9_]*[A-Z0-9](?:_\*)?|PORT)(?![\w*])")


def setting_names(text: str) -> Found:
    return [(n, name) for n, line in all_lines(text) for name in SETTING.findall(line)]


#: A metric name: not part of a path, a file name or a longer word (a ``dedupe_*`` ending names
#: every metric it begins).
METRIC = re.compile(r"(?<![\w/.-])dedupe_[a-z0-9_]*[a-z0-9](?:_\*)?(?![\w/.-]*\.\w)(?![\w*(])")


def metric_names(text: str) -> Found:
    return [(n, name) for n, line in all_lines(text) for name in METRIC.findall(line)]


def gitignored(path: str) -> bool:
    """Whether a segment of ``path`` matches a pattern of .gitignore (generated or local)."""
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.strip("/").split("/")
    return any(fnmatch(part, p) for part in parts for p in patterns) or any(
        fnmatch(path.strip("/"), p) for p in patterns if "/" in p
    )


def top_folders() -> list[str]:
    """The repository's top-level folders (neither hidden nor ignored)."""
    return sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and not gitignored(p.name)
    )


def project_files(*suffixes: str) -> Iterator[Path]:
    """The files of the top-level folders with one of ``suffixes``, ignored ones left out."""
    for folder in top_folders():
        for path in sorted((ROOT / folder).rglob("*")):
            relative = str(path.relative_to(ROOT))
            if path.suffix in suffixes and path.is_file() and not gitignored(relative):
                yield path


#: A file a project keeps at its top (README.md, CHANGELOG.md, Makefile, pyproject.toml ...),
#: named alone in a span: of the document's own project (the library's README names its own).
TOP_FILE = re.compile(r"[A-Z][A-Z_-]*\.md|Makefile|Procfile|LICENSE|pyproject\.toml")
#: A module run with ``python -m``.
MODULE = re.compile(r"(?:^|\s)-m\s+([a-z_]\w*(?:\.\w+)*)")


def file_names(text: str) -> Found:
    """The repository paths in the code of a document: each word that begins with a top-level
    folder and ``/`` (up to a ``:line`` or ``::test`` after it), each module of a top-level
    package run with ``python -m`` (as ``-m package.module``), and each span that is a top
    file's name alone. Paths into ignored folders (.cache/, data/, lake/ ...) and paths with a
    placeholder (``<id>``, ``*``, ``{a,b}``, ``$VAR``) are left out."""
    folders = top_folders()
    path = re.compile(rf"(?<![\w./$~-])((?:{'|'.join(folders)})/[\w.@+/-]*)([<*{{$]?)")
    out: Found = []
    for number, code in code_lines(text):
        if TOP_FILE.fullmatch(code.strip()):
            out.append((number, code.strip()))
        for match in path.finditer(code):
            name = match.group(1).rstrip(".")
            if not match.group(2) and not gitignored(name):
                out.append((number, name))
        for module in MODULE.findall(code):
            if module.split(".")[0] in folders:
                out.append((number, f"-m {module}"))
    return out


# --- what exists ---------------------------------------------------------------------------


def makefile_targets() -> set[str]:
    """Every target of the Makefile: each rule's targets (variables' rules left out) and the
    .PHONY list; a pattern rule's ``%`` kept for :func:`is_target`."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    targets: set[str] = set()
    for line in text.splitlines():
        rule = re.match(r"^([^\s:=#][^:=#]*?)\s*::?(?!=)", line)
        if rule:
            targets.update(t for t in rule.group(1).split() if "$" not in t)
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    targets.update(phony.group(1).split() if phony else ())
    return targets


def is_target(name: str, targets: set[str]) -> bool:
    return any(name == t or ("%" in t and fnmatch(name, t.replace("%", "*"))) for t in targets)


def settings_classes() -> set[type[EnvSettings]]:
    """Every settings class of the project: each module that declares a class of some
    ``...Settings`` base imported, then EnvSettings' subclasses walked."""
    declares = re.compile(r"^class \w+\([^)]*Settings\b", re.M)
    for path in project_files(".py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in ("tests", "libs"):
            continue
        if declares.search(path.read_text()):
            importlib.import_module(".".join(relative.with_suffix("").parts))

    def walk(cls: type[EnvSettings]) -> Iterator[type[EnvSettings]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)

    return set(walk(EnvSettings))


def documented_settings() -> set[str]:
    return {doc.env for cls in settings_classes() for _, _, doc in cls.documented()}


#: How a program reads an environment variable, by the kind of file: Python's ``os.environ`` /
#: ``getenv``; the shell's ``$NAME`` / ``${NAME...}``; make's ``$(NAME)``, ``$NAME`` in a
#: recipe's shell and ``NAME ?=``.
PYTHON_READ = re.compile(
    r"""(?:environ(?:\.get|\.setdefault|\.pop)?\s*[(\[]|getenv\()\s*["']([A-Z]\w*)["']"""
)
SHELL_READ = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")
MAKE_READ = re.compile(
    r"\$\(([A-Z][A-Z0-9_]*)\)|\$\$\{?([A-Z][A-Z0-9_]*)|^([A-Z][A-Z0-9_]*)\s*\?=", re.M
)


def reads(path: Path) -> set[str]:
    text = path.read_text()
    if path.name == "Makefile":
        return {name for groups in MAKE_READ.findall(text) for name in groups if name}
    return set((SHELL_READ if path.suffix == ".sh" else PYTHON_READ).findall(text))


def program_files() -> Iterator[Path]:
    """The files whose environment reads count: the Makefile and every Python and shell file
    (scripts/, bench/, the packages' own reads outside the settings classes, the test tiers)."""
    yield ROOT / "Makefile"
    yield from project_files(".py", ".sh")


def read_variables() -> set[str]:
    """The environment variables some program reads (the test tiers' only as DEDUPE_TEST_*: a
    test setting a worker's variable is no reader of it)."""
    names: set[str] = set()
    for path in program_files():
        found = reads(path)
        if path.relative_to(ROOT).parts[0] == "tests":
            found = {n for n in found if n.startswith("DEDUPE_TEST_")}
        names |= found
    return names


def known_settings() -> set[str]:
    return documented_settings() | read_variables()


def exported_metrics(data_dir: Path) -> set[str]:
    """Every family and sample name the worker, ingest service and Spark job export (counters'
    ``_total`` and ``_created``, histograms' ``_bucket``/``_sum``/``_count`` ...), built as
    tests/unit/docs/test_metrics_reference.py builds them (the Spark JVM's process metrics read from
    this process)."""
    saved = list(spark_metrics._jvm_pid)
    spark_metrics._jvm_pid[:] = [os.getpid()]
    try:
        exposition = generate_latest(code_registry(data_dir)).decode()
    finally:
        spark_metrics._jvm_pid[:] = saved
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


#: ``dedupe_*`` names in the docs that are no metrics: each a name in the code (checked by
#: test_the_names_that_are_no_metrics_are_in_the_code).
NOT_METRICS = {
    "dedupe_events": "the worker's Faust agent (app/worker/agents.py)",
    "dedupe_batch": "the batch entry point of the Deduplicator (app/)",
    "dedupe_native": "the native record decoder's module (native/pyproject.toml)",
}


# --- the checks ------------------------------------------------------------------------------


#: Whether a name a document gives exists (the document's path for names relative to it).
Exists = Callable[[Path, str], bool]


def missing(docs: list[Path], names: Callable[[str], Found], exists: Exists) -> list[str]:
    """``doc:line: name`` for every name a document gives that does not exist."""
    return [
        f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc.name}:{number}: {name}"
        for doc in docs
        for number, name in names(doc.read_text())
        if not exists(doc, name)
    ]


def one_of(known: set[str]) -> Exists:
    """A name of ``known``, or a ``prefix_*`` that begins one."""

    def exists(_: Path, name: str) -> bool:
        if name.endswith("_*"):
            return any(k.startswith(name[:-1]) for k in known)
        return name in known

    return exists


def file_exists(doc: Path, name: str) -> bool:
    """A path of the repository, a module, or a top file of the document's own project."""
    if name.startswith("-m "):
        module = ROOT.joinpath(*name[3:].split("."))
        return module.with_suffix(".py").is_file() or (module / "__main__.py").is_file()
    if TOP_FILE.fullmatch(name):
        project = ROOT / "libs" / doc.parent.name if doc.parent.parent.name == "libs" else ROOT
        return (project / name).exists()
    return (ROOT / name).exists()


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return exported_metrics(tmp_path_factory.mktemp("data"))


CHECKS: dict[str, tuple[Callable[[str], Found], str]] = {
    "make target": (make_targets, "not a target of the Makefile"),
    "setting": (setting_names, "no settings class documents it and no program reads it"),
    "metric": (metric_names, "not exported by the worker, the ingest service or the Spark job"),
    "file": (file_names, "no such file, folder or module in the repository"),
}


def exists_for(kind: str, metrics: set[str]) -> Exists:
    if kind == "make target":
        targets = makefile_targets()
        return lambda _, name: is_target(name, targets)
    if kind == "setting":
        return one_of(known_settings())
    if kind == "metric":
        return one_of(metrics | set(NOT_METRICS))
    return file_exists


@pytest.mark.parametrize("kind", list(CHECKS))
def test_every_name_a_doc_gives_exists(kind: str, metrics: set[str]) -> None:
    names, problem = CHECKS[kind]
    exists = exists_for(kind, metrics)

    def exists_or_removed(doc: Path, name: str) -> bool:
        return exists(doc, name) or (doc in CHANGELOGS and REMOVED.get(name) == kind)

    bad = missing(DOCS + CHANGELOGS, names, exists_or_removed)
    assert not bad, f"{kind}s {problem}:\n" + "\n".join(bad)


def test_the_names_the_changelogs_say_were_removed_are_gone(metrics: set[str]) -> None:
    back = [
        name for name, kind in REMOVED.items() if exists_for(kind, metrics)(CHANGELOGS[0], name)
    ]
    assert not back, f"named as removed in a changelog but they exist: {back}"


def test_every_metric_the_alert_rules_and_dashboard_name_is_exported(metrics: set[str]) -> None:
    bad = missing(METRIC_FILES, metric_names, one_of(metrics))
    assert not bad, "metrics not exported:\n" + "\n".join(bad)


# --- the checks see what they check -----------------------------------------------------------


def test_the_collectors_find_names_in_the_docs() -> None:
    """Checks that read nothing pass: each must find a fair number of names in the docs."""
    counts = {
        kind: len({name for doc in DOCS for _, name in names(doc.read_text())})
        for kind, (names, _) in CHECKS.items()
    }
    assert counts["make target"] > 20, counts
    assert counts["setting"] > 60, counts
    assert counts["metric"] > 20, counts
    assert counts["file"] > 50, counts
    assert len(metric_names((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())) > 10


def test_the_sources_of_truth_are_read(metrics: set[str]) -> None:
    targets = makefile_targets()
    assert {"run", "test", "test-unit", "kafka-up", "bench-cluster", "help"} <= targets
    assert is_target("test-lane-third", targets)
    classes = {cls.__name__ for cls in settings_classes()}
    assert {"Settings", "IngestSettings", "SparkSettings", "KafkaSecuritySettings"} <= classes
    settings = known_settings()
    assert {"DEDUPE_WINDOW", "KAFKA_SASL_USERNAME", "PORT", "DEDUPE_INGEST_HOST"} <= settings
    assert {"DEDUPE_LAKE_DIR", "DEDUPE_SPARK_MASTER"} <= settings  # the Spark job's
    assert {"KAFKA_PORT", "BENCH_EVENTS", "DEDUPE_TEST_KAFKA_PORT"} <= settings  # programs'
    assert {"dedupe_records", "dedupe_records_total", "dedupe_commit_seconds_bucket"} <= metrics
    assert {"dedupe_build_info", "dedupe_lake_rows_total", "dedupe_ingest_events"} <= metrics
    assert "dedupe_spark_jvm_process_resident_memory_bytes" in metrics


def test_the_checked_families_are_the_settings_classes() -> None:
    """The pattern checks every family of names the settings classes read."""
    for env in documented_settings():
        assert SETTING.fullmatch(env), env


def test_the_names_that_are_no_metrics_are_in_the_code() -> None:
    code = "\n".join(p.read_text() for p in (ROOT / "app").rglob("*.py"))
    code += (ROOT / "native" / "pyproject.toml").read_text()
    for name in NOT_METRICS:
        assert re.search(rf"(def {name}\b|name=\"{name}\"|module-name = \"{name}\")", code), name


def test_a_planted_name_of_each_kind_is_reported(tmp_path: Path, metrics: set[str]) -> None:
    doc = tmp_path / "planted.md"
    doc.write_text(
        "# Planted\n"
        "Run `make test-unit`, then `make no-such-target KAFKA_PORT=1`.\n"
        "```bash\n"
        "DEDUPE_WINDOW=1h make run   # fine\n"
        "make kafka-up && make nowhere-target\n"
        "```\n"
        "Set `DEDUPE_NO_SUCH_SETTING` (not `DEDUPE_WINDOW`); KAFKA_SASL_* and DEDUPE_NOPE_*.\n"
        "Watch `dedupe_no_such_metric_total` beside `dedupe_records_total`.\n"
        "See `app/no_such_module.py`, `app/settings/kafka.py:12`, `docs/`, `Makefile`, `NOPE.md`.\n"
        "Run `python -m scripts.nope` and `.venv/bin/python -m app grow`, not `-m pytest`.\n"
        "Not paths: `data/x.json`, `lake/<table>/`, `docker/requirements-*.txt`, `$X/app/y`.\n"
    )

    def planted(kind: str) -> list[str]:
        return missing([doc], CHECKS[kind][0], exists_for(kind, metrics))

    assert planted("make target") == [
        "planted.md:2: no-such-target",
        "planted.md:5: nowhere-target",
    ]
    assert planted("setting") == [
        "planted.md:7: DEDUPE_NO_SUCH_SETTING",
        "planted.md:7: DEDUPE_NOPE_*",
    ]
    assert planted("metric") == ["planted.md:8: dedupe_no_such_metric_total"]
    assert planted("file") == [
        "planted.md:9: app/no_such_module.py",
        "planted.md:9: NOPE.md",
        "planted.md:10: -m scripts.nope",
    ]
    assert [name for _, name in make_targets(doc.read_text())] == [
        "test-unit",
        "no-such-target",
        "run",
        "kafka-up",
        "nowhere-target",
    ]
    assert [name for _, name in file_names(doc.read_text())] == [
        "app/no_such_module.py",
        "app/settings/kafka.py",
        "docs/",
        "Makefile",
        "NOPE.md",
        "-m scripts.nope",
        "-m app",
    ]
    library = ROOT / "libs" / "idempotent-consumer" / "README.md"
    assert file_exists(library, "CHANGELOG.md") and not file_exists(library, "Procfile")


def test_the_reads_of_a_program_are_found(tmp_path: Path) -> None:
    files = {
        "x.py": 'a = os.environ.get("A_B")\nb = os.getenv("C")\nc = os.environ["D"]\n"$NOT_READ"',
        "x.sh": 'echo "${KAFKA_PORT:-9092}" $PG_PORT os.getenv("NOT_READ")',
        "Makefile": "T ?= 1\nX := 1\nrun:\n\t$(PY) -m x $(BENCH_ARGS) $${HOME}\n",
    }
    found = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        found[name] = reads(tmp_path / name)
    assert found == {
        "x.py": {"A_B", "C", "D"},
        "x.sh": {"KAFKA_PORT", "PG_PORT"},
        "Makefile": {"T", "PY", "BENCH_ARGS", "HOME"},
    }
