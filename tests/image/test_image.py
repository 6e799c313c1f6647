"""The images docker/Dockerfile builds start and carry an event from the ingest to the lake.

No Docker engine here: tests/image/dockerfile.py builds each stage's file set from the
Dockerfile's own COPY lines, installs it into a clean virtualenv with the Dockerfile's own
``pip install`` lines (the lock files, hashes checked) and runs the processes with the image's
ENV, WORKDIR and USER (as root, the processes switch to the image's uid, so a write outside its
writable paths fails as in the image). The app stage runs a worker (its CMD) and the ingest
(the Procfile's web command, as compose and the manifests run it); the spark stage, built on
top as ``FROM app`` is, runs the lake job. One event posted to the ingest must come out of
the worker on the clean topic and land in the Delta table.

This test exists because an image that copied neither adapters/ nor recovery/ passed a unit
test that compared five package names: only starting the processes from the image's own file
set shows what it lacks.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
from deltalake.exceptions import TableNotFoundError

from scripts.topic_reader import read_topic_sync
from tests.image.dockerfile import ImageBuild, lineage
from tests.ingest.support import IngestProcess, json_headers
from tests.spark.harness import LakeJob, read_without_spark
from tests.support import ROOT, Broker, Names, Runtime, delete_topics_after
from tests.workers import Worker, port_in_range

pytestmark = pytest.mark.image


@pytest.fixture
def build_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    # Not pytest's tmp_path: its parents are closed to other users, and the image's user must
    # reach the file set as it reaches /srv in the image. Kept when the test fails (the logs
    # of the processes are in it), else removed: a build is about 1 GB.
    root = Path(tempfile.mkdtemp(prefix="dedupe-image-"))
    root.chmod(0o755)
    yield root
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(f"\nimage build kept for a look: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def runtime_of(image: ImageBuild) -> Runtime:
    assert image.user is not None and image.user[0] != 0, "the image must not run as root"
    if os.geteuid() != 0:  # not root: the run is already unprivileged and cannot switch
        return Runtime(python=image.python, cwd=image.cwd)
    return Runtime(python=image.python, cwd=image.cwd, user=image.user)


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


class Process(Protocol):
    def alive(self) -> bool: ...
    def log_text(self) -> str: ...


def wait_for(what: str, check: Callable[[], bool], timeout: float, procs: list[Process]) -> None:
    started = time.monotonic()
    while not check():
        for proc in procs:
            if not proc.alive():
                raise AssertionError(f"exited waiting for {what}:\n{proc.log_text()[-4000:]}")
        if time.monotonic() - started > timeout:
            tails = "\n".join(p.log_text()[-3000:] for p in procs)
            raise AssertionError(f"no {what} after {timeout}s:\n{tails}")
        time.sleep(0.5)


def test_the_images_carry_an_event_from_the_ingest_to_the_lake(
    broker: Broker, names: Names, build_root: Path
) -> None:
    assert [s.name for s in lineage("spark")] == ["app", "spark"]
    build_env = {k: v for k, v in os.environ.items() if not k.startswith(("DEDUPE_", "SPARK_"))}
    # The native stage compiles native/ with cargo into the target directory make install
    # built: cargo's own cache of the same sources stands in for a clean one, as pip's cache
    # stands in for PyPI (what changed is compiled again; cargo checks).
    build_env["CARGO_TARGET_DIR"] = str(ROOT / "native" / "target")
    image = ImageBuild(build_root)
    for stage in lineage("app"):
        image.build(stage, build_env)
    image.writable()
    runtime = runtime_of(image)
    app_env = image.process_env()
    assert "DEDUPE_DATA_DIR" in app_env, "the image must put the worker's state on its volume"

    worker = Worker(broker, names, extra_env=app_env, runtime=runtime)
    ingest = IngestProcess(
        broker,
        names.input_topic,
        names.data_root / "ingest.log",
        # The image tier's own ports: the ingest and network-fault tiers take theirs from
        # 19600-19699 in other lanes of make test at the same time.
        port=port_in_range(19700, 20),
        extra_env=app_env,
        runtime=runtime,
    )
    job: LakeJob | None = None
    try:
        worker.start()
        worker.wait_assigned()
        ingest.start()
        ingest.wait_ready()
        if runtime.user is not None:
            for proc in (worker.proc, ingest.proc):
                assert proc is not None and uid_of(proc.pid) == runtime.user[0]
        # The native stage's wheel is in the image, and the image asks for it (on): the worker
        # says so at start (the log line of app/worker/factory.py's decoding_line).
        assert app_env.get("DEDUPE_NATIVE_RECORDS") == "on"
        wait_for(
            "the native decoder's start-up line",
            lambda: "decoded natively (dedupe_native)" in worker.log_text(),
            60,
            [worker],
        )

        message_id = f"image-{uuid.uuid4().hex}"
        event = {"type": "track", "event": "Image Built", "userId": "u", "messageId": message_id}
        request = urllib.request.Request(
            ingest.url + "/v1/track", json.dumps(event).encode(), json_headers(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200

        def forwarded() -> bool:
            records = read_topic_sync(broker.bootstrap, names.output_topic, timeout=30)
            return any(message_id.encode() in (r.value or b"") for r in records)

        wait_for("event on the clean topic", forwarded, 120, [worker, ingest])

        for stage in lineage("spark")[1:]:  # FROM app: on top of what the app stage left
            image.build(stage, build_env)
        image.writable()
        spark_runtime = runtime_of(image)
        spark_env = image.process_env()
        lake_job = job = LakeJob(
            broker,
            names.output_topic,
            Path(spark_env["DEDUPE_LAKE_DIR"]),
            extra_env=spark_env,
            runtime=spark_runtime,
        )
        job.start()

        def in_lake() -> bool:
            try:
                return message_id in read_without_spark(lake_job.events_table)
            except TableNotFoundError:  # the job has not committed the table's first version
                return False

        wait_for("event in the lake", in_lake, 240, [job])
        if spark_runtime.user is not None:
            assert job.proc is not None and uid_of(job.proc.pid) == spark_runtime.user[0]
        print(f"\nimage build seconds: {image.seconds}")
    finally:
        if job is not None:
            job.kill()
        ingest.stop()
        worker.kill()
        delete_topics_after(broker, names)
