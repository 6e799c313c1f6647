"""What every component's ``GET /metrics`` says about its own process and build: the
``process_*`` family of prometheus_client (resident and virtual memory, CPU seconds, start
time, open and maximum file descriptors, read from ``/proc``: Linux only) and
``dedupe_build_info{version}``, always 1, naming the installed version of the project.

Here because this package is the one every component (the worker, the ingest service, the Spark
job) and every image shares; docs/metrics.md lists the metrics.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector

#: The distribution whose version ``dedupe_build_info`` reports (pyproject.toml).
DISTRIBUTION = "dedupe"


def installed_version() -> str:
    """The project's installed version; "unknown" when run from a tree that is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def register(registry: CollectorRegistry) -> None:
    """Add the process metrics and ``dedupe_build_info`` to ``registry``."""
    ProcessCollector(registry=registry)
    build = Gauge(
        "dedupe_build_info",
        "Always 1: the version of the project this process runs (label version)",
        labelnames=["version"],
        registry=registry,
    )
    build.labels(installed_version()).set(1)
