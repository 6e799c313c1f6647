"""Spark's Kafka connector as local jars: resolved by Maven from Maven Central once, at set-up.

    python -m spark.jars              # resolve into the cache (if not there yet) and list the jars
    python -m spark.jars --jars-arg   # print them comma-separated, for spark-submit --jars

You should see, the first time (a few seconds; later runs print only the list)::

    spark-jars: resolving org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 from Maven Central ...
    spark-jars: 4 jars in .cache/spark-jars/4.0.0 (9 more of the closure ship with pyspark)
      commons-pool2-2.12.0.jar
      kafka-clients-3.9.0.jar
      spark-sql-kafka-0-10_2.13-4.0.0.jar
      spark-token-provider-kafka-0-10_2.13-4.0.0.jar

The connector is pinned to the installed pyspark's version (Scala 2.13, the only Scala of Spark 4)
through ``scripts/spark/pom.xml``. Maven copies the connector's runtime closure; every jar whose
artifact pyspark already ships (scala-library, slf4j-api, lz4-java, snappy-java, the Hadoop
client...) is dropped, so the JVM never holds two versions of one library. The job passes the
rest as ``spark.jars`` (local files): nothing is downloaded when it runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyspark

from spark.settings import ROOT, SparkSettings, SparkSettingsError

POM = ROOT / "scripts" / "spark" / "pom.xml"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
#: Written last: a cache directory without it is incomplete and resolved again.
MANIFEST = "MANIFEST.txt"


class JarsMissingError(RuntimeError):
    """The connector jars for this pyspark are not in the cache (run ``make spark-jars``)."""


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


def cache_dir(jars_root: Path, version: str | None = None) -> Path:
    return jars_root / (version or spark_version())


def cached_jars(jars_root: Path, version: str | None = None) -> list[Path]:
    """The resolved jars for this pyspark; raises :class:`JarsMissingError` if not resolved."""
    version = version or spark_version()
    directory = cache_dir(jars_root, version)
    if not (directory / MANIFEST).is_file():
        raise JarsMissingError(
            f"Spark's Kafka connector {CONNECTOR}:{version} is not in {directory}; "
            "run `make spark-jars` (resolves it from Maven Central once)"
        )
    jars = sorted(directory.glob("*.jar"))
    if not any(j.name == f"{CONNECTOR}-{version}.jar" for j in jars):
        raise JarsMissingError(f"{directory} has no {CONNECTOR}-{version}.jar; delete it and retry")
    return jars


def _artifacts(tree: Path) -> list[Artifact]:
    """Jars copied with ``useRepositoryLayout``: <group path>/<artifact>/<version>/<file>."""
    out = []
    for jar in sorted(tree.rglob("*.jar")):
        parts = jar.relative_to(tree).parts
        out.append(Artifact(".".join(parts[:-3]), parts[-3], parts[-2], jar))
    return out


def resolve(jars_root: Path, version: str | None = None, *, mvn: str = "mvn") -> list[Path]:
    """Resolve the connector's runtime closure into the cache (no-op when already there)."""
    version = version or spark_version()
    try:
        return cached_jars(jars_root, version)
    except JarsMissingError:
        pass
    if shutil.which(mvn) is None:
        raise JarsMissingError(f"Maven ({mvn}) is needed once to fetch the Spark Kafka jars")
    target = cache_dir(jars_root, version)
    tmp = jars_root / f".tmp-{version}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tree = tmp / "tree"
    print(
        f"spark-jars: resolving org.apache.spark:{CONNECTOR}:{version} from Maven Central ...",
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
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise JarsMissingError(
            f"Maven could not resolve {CONNECTOR}:{version} (is that release on Maven Central?):"
            f"\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    shipped = pyspark_jar_names()
    kept: list[Artifact] = []
    manifest = [f"# {CONNECTOR}:{version} runtime closure, resolved by `python -m spark.jars`"]
    for art in _artifacts(tree):
        same = shipped_by_pyspark(art.artifact, shipped)
        if same is None:
            kept.append(art)
            manifest.append(f"kept    {art.coordinates}")
            shutil.copy2(art.path, tmp / art.path.name)
        else:
            manifest.append(f"dropped {art.coordinates} (pyspark ships {same})")
    shutil.rmtree(tree)
    if not any(a.artifact == CONNECTOR and a.version == version for a in kept):
        shutil.rmtree(tmp, ignore_errors=True)
        raise JarsMissingError(f"{CONNECTOR}-{version}.jar missing after resolution")
    (tmp / MANIFEST).write_text("\n".join(manifest) + "\n")
    if target.exists():  # another process resolved it meanwhile, or an incomplete earlier run
        if (target / MANIFEST).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            return cached_jars(jars_root, version)
        shutil.rmtree(target)
    tmp.rename(target)
    return cached_jars(jars_root, version)


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
