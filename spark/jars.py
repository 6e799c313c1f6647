"""Spark's Kafka connector and Delta Lake as local jars: resolved from Maven Central at set-up.

    python -m spark.jars              # resolve into the cache (if not there yet) and list the jars
    python -m spark.jars --jars-arg   # print them comma-separated, for spark-submit --jars

You should see, the first time (a few seconds; later runs print only the list)::

    spark-jars: resolving org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 and
    io.delta:delta-spark_2.13:4.0.0 from Maven Central ...
    spark-jars: 7 jars in .cache/spark-jars/4.0.0-delta-4.0.0 (10 more of the closure ship
    with pyspark)
      commons-pool2-2.12.0.jar
      dedupe-logstore-<hash>.jar
      delta-spark_2.13-4.0.0.jar
      delta-storage-4.0.0.jar
      kafka-clients-3.9.0.jar
      spark-sql-kafka-0-10_2.13-4.0.0.jar
      spark-token-provider-kafka-0-10_2.13-4.0.0.jar

The connector is pinned to the installed pyspark's version and Delta to the installed
delta-spark's (Scala 2.13, the only Scala of Spark 4) through ``scripts/spark/pom.xml``. Maven
copies their runtime closure; every jar whose artifact pyspark already ships (scala-library,
slf4j-api, lz4-java, snappy-java, antlr4-runtime, the Hadoop client...) is dropped, so the JVM
never holds two versions of one library. ``scripts/spark/LinkLogStore.java`` (Delta's commit
for local files, safe with two writing JVMs) is compiled with ``javac`` against delta-storage
into ``dedupe-logstore-<hash of its source>.jar``. The job passes the jars as ``spark.jars``
(local files): nothing is downloaded when it runs.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyspark

from spark.settings import ROOT, SparkSettings, SparkSettingsError

POM = ROOT / "scripts" / "spark" / "pom.xml"
LOG_STORE_SOURCE = ROOT / "scripts" / "spark" / "LinkLogStore.java"
#: The class spark/session.py sets as Delta's log store for file: paths.
LOG_STORE_CLASS = "dedupe.delta.LinkLogStore"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
DELTA = "delta-spark_2.13"
DELTA_STORAGE = "delta-storage"
#: Written last: a cache directory without it is incomplete and resolved again.
MANIFEST = "MANIFEST.txt"


class JarsMissingError(RuntimeError):
    """The jars for this pyspark and delta-spark are not in the cache (run ``make spark-jars``)."""


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str
    path: Path

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def spark_version() -> str:
    """The installed pyspark's version: the connector must be this exact release."""
    return pyspark.__version__


def delta_version() -> str:
    """The installed delta-spark's version (its Python API): the Delta jars must match it."""
    try:
        return importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError:
        raise JarsMissingError("delta-spark is not installed (make install)") from None


def pyspark_jar_names() -> list[str]:
    """File names of the jars pyspark ships (its Spark distribution)."""
    return sorted(os.listdir(Path(pyspark.__file__).parent / "jars"))


def shipped_by_pyspark(artifact: str, shipped: list[str]) -> str | None:
    """The pyspark jar of the same artifact (any version), or None."""
    prefix = artifact + "-"
    for name in shipped:
        if name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit():
            return name
    return None


def log_store_jar_name() -> str:
    """The compiled log store's jar: named by its source's hash, so an edit rebuilds it."""
    digest = hashlib.sha256(LOG_STORE_SOURCE.read_bytes()).hexdigest()[:12]
    return f"dedupe-logstore-{digest}.jar"


def cache_dir(jars_root: Path, version: str | None = None, delta: str | None = None) -> Path:
    return jars_root / f"{version or spark_version()}-delta-{delta or delta_version()}"


def cached_jars(
    jars_root: Path, version: str | None = None, delta: str | None = None
) -> list[Path]:
    """The resolved jars for this pyspark and delta-spark; raises :class:`JarsMissingError`
    when they are not resolved (or the log store's source changed since it was built)."""
    version = version or spark_version()
    delta = delta or delta_version()
    directory = cache_dir(jars_root, version, delta)
    if not (directory / MANIFEST).is_file():
        raise JarsMissingError(
            f"Spark's Kafka connector {CONNECTOR}:{version} and Delta Lake {DELTA}:{delta} are "
            f"not in {directory}; run `make spark-jars` (resolves them from Maven Central once)"
        )
    jars = sorted(directory.glob("*.jar"))
    names = {j.name for j in jars}
    for needed in (f"{CONNECTOR}-{version}.jar", f"{DELTA}-{delta}.jar", log_store_jar_name()):
        if needed not in names:
            raise JarsMissingError(f"{directory} has no {needed}; run `make spark-jars`")
    return jars


def _artifacts(tree: Path) -> list[Artifact]:
    """Jars copied with ``useRepositoryLayout``: <group path>/<artifact>/<version>/<file>."""
    out = []
    for jar in sorted(tree.rglob("*.jar")):
        parts = jar.relative_to(tree).parts
        out.append(Artifact(".".join(parts[:-3]), parts[-3], parts[-2], jar))
    return out


def build_log_store(directory: Path, *, javac: str = "javac") -> Path:
    """Compile ``LinkLogStore.java`` against the cached delta-storage and pyspark's Hadoop
    client into ``directory`` (a jar is a zip of class files; no ``jar`` tool needed)."""
    if shutil.which(javac) is None:
        raise JarsMissingError(f"a JDK ({javac}) is needed once to build {LOG_STORE_SOURCE.name}")
    storage = sorted(directory.glob(f"{DELTA_STORAGE}-*.jar"))
    hadoop = Path(pyspark.__file__).parent / "jars"
    classpath = [*storage, *sorted(hadoop.glob("hadoop-client-api-*.jar"))]
    if len(classpath) < 2:
        raise JarsMissingError(f"no {DELTA_STORAGE} or hadoop-client-api jar to compile against")
    target = directory / log_store_jar_name()
    with tempfile.TemporaryDirectory(dir=directory) as classes:
        result = subprocess.run(
            [
                *(javac, "--release", "17", "-nowarn", "-d", classes),
                *("-cp", os.pathsep.join(str(p) for p in classpath), str(LOG_STORE_SOURCE)),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise JarsMissingError(f"javac failed on {LOG_STORE_SOURCE}:\n{result.stderr[-3000:]}")
        partial = target.with_suffix(".tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(Path(classes).rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        partial.rename(target)
    for stale in directory.glob("dedupe-logstore-*.jar"):
        if stale != target:
            stale.unlink()
    return target


def resolve(
    jars_root: Path, version: str | None = None, delta: str | None = None, *, mvn: str = "mvn"
) -> list[Path]:
    """Resolve the connector's and Delta's runtime closure into the cache and build the log
    store (no-op when already there)."""
    version = version or spark_version()
    delta = delta or delta_version()
    try:
        return cached_jars(jars_root, version, delta)
    except JarsMissingError:
        pass
    target = cache_dir(jars_root, version, delta)
    if (target / MANIFEST).is_file():  # resolved; only the log store is missing or stale
        build_log_store(target)
        return cached_jars(jars_root, version, delta)
    if shutil.which(mvn) is None:
        raise JarsMissingError(f"Maven ({mvn}) is needed once to fetch the Spark jars")
    tmp = jars_root / f".tmp-{version}-{delta}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tree = tmp / "tree"
    print(
        f"spark-jars: resolving org.apache.spark:{CONNECTOR}:{version} and "
        f"io.delta:{DELTA}:{delta} from Maven Central ...",
        file=sys.stderr,
        flush=True,
    )
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(POM),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        "-Dmdep.useRepositoryLayout=true",
        f"-DoutputDirectory={tree}",
        f"-Dspark.version={version}",
        f"-Ddelta.version={delta}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise JarsMissingError(
            f"Maven could not resolve {CONNECTOR}:{version} and {DELTA}:{delta} (are those "
            f"releases on Maven Central?):\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    shipped = pyspark_jar_names()
    kept: list[Artifact] = []
    manifest = [
        f"# {CONNECTOR}:{version} and {DELTA}:{delta} runtime closure, resolved by "
        "`python -m spark.jars`"
    ]
    for art in _artifacts(tree):
        same = shipped_by_pyspark(art.artifact, shipped)
        if same is None:
            kept.append(art)
            manifest.append(f"kept    {art.coordinates}")
            shutil.copy2(art.path, tmp / art.path.name)
        else:
            manifest.append(f"dropped {art.coordinates} (pyspark ships {same})")
    shutil.rmtree(tree)
    for needed, needed_version in ((CONNECTOR, version), (DELTA, delta)):
        if not any(a.artifact == needed and a.version == needed_version for a in kept):
            shutil.rmtree(tmp, ignore_errors=True)
            raise JarsMissingError(f"{needed}-{needed_version}.jar missing after resolution")
    try:
        build_log_store(tmp)
    except JarsMissingError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest.append(f"built   {LOG_STORE_CLASS} from {LOG_STORE_SOURCE.relative_to(ROOT)}")
    (tmp / MANIFEST).write_text("\n".join(manifest) + "\n")
    if target.exists():  # another process resolved it meanwhile, or an incomplete earlier run
        if (target / MANIFEST).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            return resolve(jars_root, version, delta, mvn=mvn)
        shutil.rmtree(target)
    tmp.rename(target)
    return cached_jars(jars_root, version, delta)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jars-arg", action="store_true", help="print the jars comma-separated (spark-submit)"
    )
    args = parser.parse_args(argv)
    try:
        settings = SparkSettings.from_env()
        jars = resolve(settings.jars_dir)
    except (SparkSettingsError, JarsMissingError) as exc:
        print(f"spark-jars: {exc}", file=sys.stderr)
        return 2
    if args.jars_arg:
        print(",".join(str(j) for j in jars))
        return 0
    directory = cache_dir(settings.jars_dir)
    dropped = sum(
        line.startswith("dropped") for line in (directory / MANIFEST).read_text().splitlines()
    )
    try:
        shown = directory.relative_to(Path.cwd())
    except ValueError:
        shown = directory
    print(
        f"spark-jars: {len(jars)} jars in {shown} ({dropped} more of the closure ship with pyspark)"
    )
    for jar in jars:
        print(f"  {jar.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
