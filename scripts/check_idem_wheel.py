"""Release check of the idempotent-consumer library: build it, check the metadata, install the
wheel into a clean virtualenv and run the README's example there.

How to run (PostgreSQL and a broker up: ``scripts/servers.sh up``, ``scripts/kafka-local.sh up``;
``tests/idempotency/test_wheel.py`` runs it in ``make test-idempotency``)::

    python -m scripts.check_idem_wheel --dsn postgresql://postgres@127.0.0.1:15432/postgres \\
        --kafka 127.0.0.1:9092

The steps, each failing loudly:

1. ``python -m build`` makes the sdist and, from the unpacked sdist, the wheel (so a file
   missing from the sdist breaks the wheel too);
2. ``twine check --strict`` on both, and the wheel's METADATA read for the name, version,
   license expression, classifiers, extras and the README as its description; LICENSE in both;
3. a virtualenv with nothing in it gets the wheel alone: ``from idempotent_consumer import *``
   and a claim on ``MemoryStore`` work with no extra installed;
4. the same virtualenv gets ``[postgres,kafka]`` and runs the README's example, extracted
   from the README (so the README and this check cannot drift) against the given PostgreSQL
   and broker: each order charged once, each repeat answered, "5 charges for 5 orders".

What you should see at the end::

    wheel check: ok (idempotent_consumer-1.1.0-py3-none-any.whl, sdist, clean virtualenv)
"""

from __future__ import annotations

import argparse
import email
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import uuid
import zipfile
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "libs" / "idempotent-consumer"
README = LIBRARY / "README.md"
MARKER = "<!-- example: charge_once.py -->"

# Run in the clean virtualenv with the bare wheel: every public name, and a claim, with none
# of the extras' clients importable.
NO_EXTRAS = """
import importlib.util, sys
from idempotent_consumer import *
for client in ("psycopg", "redis", "aiokafka"):
    assert importlib.util.find_spec(client) is None, client + " is installed"
idem = SyncIdempotency(MemoryStore(100), "check")
with idem.claim("e1") as claim:
    claim.complete("first")
with idem.claim("e1") as claim:
    assert claim.done and claim.result == "first"
try:
    from idempotent_consumer import PostgresStore
except ImportError as exc:
    assert "pip install 'idempotent-consumer[postgres]'" in str(exc), exc
else:
    raise AssertionError("PostgresStore imported without psycopg")
print("no extras: ok")
"""


def readme_example(text: str) -> str:
    """The Python block right after the example's marker in the README."""
    after = text.split(MARKER, 1)
    if len(after) != 2:
        raise ValueError(f"README has no {MARKER!r}")
    found = re.match(r"\s*```python\n(.*?)\n```", after[1], re.DOTALL)
    if not found:
        raise ValueError("the example's marker is not followed by a ```python block")
    return found.group(1) + "\n"


def run(
    cmd: list[str], timeout: float = 300, cwd: Path | None = None, env: dict[str, str] | None = None
) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


def build(outdir: Path) -> tuple[Path, Path]:
    run([sys.executable, "-m", "build", "--outdir", str(outdir), str(LIBRARY)])
    (sdist,) = outdir.glob("*.tar.gz")
    (wheel,) = outdir.glob("*.whl")
    return sdist, wheel


def dependency_problems(requires: list[str]) -> list[str]:
    """The extras' pins a user relies on: psycopg's pure build in ``postgres`` (the binary
    one only in ``binary``), redis-py 5.0.1 or newer."""
    problems = []
    postgres = [r for r in requires if r.startswith("psycopg") and 'extra == "postgres"' in r]
    if not postgres or any("binary" in r for r in postgres) or "pool" not in postgres[0]:
        problems.append(f"the postgres extra: {postgres} (psycopg[pool], not binary)")
    binary = [r for r in requires if 'extra == "binary"' in r]
    if not any("psycopg[binary]" in r for r in binary):
        problems.append(f"the binary extra: {binary}")
    redis = [r for r in requires if r.startswith("redis")]
    if not any(">=5.0.1" in r for r in redis):
        problems.append(f"the redis extra: {redis} (redis>=5.0.1)")
    return problems


def metadata_problems(sdist: Path, wheel: Path) -> list[str]:
    """What a package index or a reader of the project page would miss; [] when all is there."""
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
    problems = []
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(whl.read(meta_name))
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append("LICENSE missing from the wheel")
        if "idempotent_consumer/py.typed" not in names:
            problems.append("py.typed missing from the wheel")
    with tarfile.open(sdist) as tar:
        if not any(n.endswith("/LICENSE") for n in tar.getnames()):
            problems.append("LICENSE missing from the sdist")
    expected = {"Name": "idempotent-consumer", "License-Expression": "Apache-2.0"}
    for field, value in expected.items():
        if meta.get(field) != value:
            problems.append(f"{field}: {meta.get(field)!r}, expected {value!r}")
    classifiers = meta.get_all("Classifier") or []
    pythons = [f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)]
    for needed in (*pythons, "Typing :: Typed"):
        if needed not in classifiers:
            problems.append(f"classifier {needed!r} missing")
    extras = set(meta.get_all("Provides-Extra") or [])
    if not {"postgres", "binary", "redis", "kafka", "all"} <= extras:
        problems.append(f"extras {sorted(extras)}")
    problems += dependency_problems(meta.get_all("Requires-Dist") or [])
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    if urls.get("Repository") != "https://github.com/dedupe/dedupe":
        problems.append(f"project URLs {urls}")
    if not (meta.get("Author") or meta.get("Author-email")):
        problems.append("no author")
    if meta.get("Description-Content-Type") != "text/markdown":
        problems.append("the README is not the description (text/markdown)")
    if MARKER not in (meta.get_payload() or ""):
        problems.append("the description is not the library's README")
    return problems


def clean_venv(where: Path) -> Path:
    """A virtualenv with nothing but pip: no site packages, not the project's venv."""
    run([sys.executable, "-m", "venv", str(where)])
    return where / "bin" / "python"


def pip_install(python: Path, *what: str) -> None:
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *what])


def run_example(python: Path, dsn: str, kafka: str, workdir: Path) -> list[str]:
    """The README's example in the clean virtualenv; its output lines."""
    script = workdir / "charge_once.py"
    script.write_text(readme_example(README.read_text()))
    topic = f"orders-{uuid.uuid4().hex[:10]}"
    env = {"PATH": os.environ.get("PATH", ""), "DSN": dsn, "KAFKA": kafka, "TOPIC": topic}
    return run([str(python), str(script)], timeout=180, cwd=workdir, env=env).splitlines()


def example_problems(lines: list[str]) -> list[str]:
    charged = sorted(line.split()[1] for line in lines if line.startswith("charged "))
    repeats = sorted(line.split()[1] for line in lines if line.startswith("repeat "))
    orders = [f"order-{n}" for n in range(1, 6)]
    problems = []
    if charged != orders:
        problems.append(f"charged {charged}, expected each of {orders} once")
    if repeats != orders:
        problems.append(f"repeats {repeats}, expected each of {orders} once")
    if not lines or lines[-1] != "5 charges for 5 orders":
        problems.append(f"last line {lines[-1:]}, expected '5 charges for 5 orders'")
    return problems


def check(dsn: str, kafka: str, workdir: Path) -> list[str]:
    """Every step; the problems found ([] when the release is sound)."""
    sdist, wheel = build(workdir / "dist")
    problems = metadata_problems(sdist, wheel)
    python = clean_venv(workdir / "venv")
    pip_install(python, str(wheel))
    if "no extras: ok" not in run([str(python), "-c", NO_EXTRAS], cwd=workdir):
        problems.append("the import without extras printed nothing")
    pip_install(python, f"{wheel}[postgres,kafka]")
    # A schema of its own (dropped after): a second run in the same one would find the orders
    # charged and answer every record as a repeat, as the README says.
    schema = f"wheel_check_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        sep = "&" if "?" in dsn else "?"
        in_schema = f"{dsn}{sep}options=-csearch_path%3D{schema}"
        problems += example_problems(run_example(python, in_schema, kafka, workdir))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", required=True, help="PostgreSQL for the README's example")
    parser.add_argument("--kafka", required=True, help="bootstrap servers for the example")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="idem-wheel-") as tmp:
        problems = check(args.dsn, args.kafka, Path(tmp))
        wheel = next((Path(tmp) / "dist").glob("*.whl")).name
    for problem in problems:
        print(f"wheel check: {problem}", file=sys.stderr)
    print(f"wheel check: {'FAILED' if problems else 'ok'} ({wheel}, sdist, clean virtualenv)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
