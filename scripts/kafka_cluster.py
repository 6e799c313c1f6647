"""A production-shaped local Kafka cluster: one dedicated KRaft controller and three brokers,
each its own JVM, formatted with Kafka 4.x's defaults (no ``--feature`` overrides, so the
cluster finalizes transaction version 2 and eligible leader replicas), replication 3,
``min.insync.replicas=2``, unclean leader election off. The single-node broker of
``scripts/kafka-local.sh`` stays the default of ``make run``; this is the shape users run, for
the cluster test tier and benchmarks.

How to run (from the repo root, after ``make install kafka-jars``)::

    python -m scripts.kafka_cluster up       # controller :9300, brokers :9301-9303
    python -m scripts.kafka_cluster status   # one line per node, exit 3 when a node is down
    python -m scripts.kafka_cluster down     # brokers (controlled shutdown), then the controller
    python -m scripts.kafka_cluster wipe     # down + delete the data dir

``KAFKA_CLUSTER_PORT`` (default 9300) is the controller's port; broker ``n`` (1..``KAFKA_NODES``,
default 3) listens on ``KAFKA_CLUSTER_PORT + n``. Data, configs, logs and pid files live in
``.cache/kafka-cluster/<port>/`` (``KAFKA_CLUSTER_DIR``). What you should see from ``up``: a few
``kafka-cluster: ...`` lines ending in
``kafka-cluster: 3 brokers ready on 127.0.0.1:9301,127.0.0.1:9302,127.0.0.1:9303 in 25s``.
``make kafka-cluster-up`` / ``make kafka-cluster-down`` do the same.

Why these settings: with replication 3 and ``min.insync.replicas=2`` an acknowledged write (the
producers use ``acks=all``) is on two brokers before anyone reads it, so any one broker can die
without losing a committed transaction; with unclean election off a replica that missed writes
never becomes leader. ``__transaction_state`` gets the same guarantees
(``transaction.state.log.min.isr=2``). The controller is its own JVM for the reason
scripts/kafka-local.sh gives ("Why two JVMs"): a killed broker is fenced by a live controller.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from scripts import kafka_cluster_health as cluster_health
from scripts import kafka_cluster_nodes as cluster_nodes
from scripts.kafka_cluster_nodes import Node

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = ROOT / "scripts" / "kafka-local.sh"


def say(msg: str) -> None:
    print(f"kafka-cluster: {msg}", file=sys.stderr, flush=True)


class Cluster:
    """The controller and brokers of one data dir; every call is safe to repeat."""

    def __init__(
        self,
        port: int | None = None,
        nodes: int | None = None,
        data_dir: Path | None = None,
        *,
        proxied: bool = False,
    ) -> None:
        """``proxied``: each broker also listens on its port + 10 and advertises port + 20,
        where a fault proxy (tests/faults/proxy.py) forwards to it (the cluster tier's
        network rows)."""
        self.proxied = proxied
        self.port = port or int(os.environ.get("KAFKA_CLUSTER_PORT", "9300"))
        self.size = nodes or int(os.environ.get("KAFKA_NODES", "3"))
        if not 3 <= self.size <= 9:
            raise SystemExit("kafka-cluster: KAFKA_NODES must be 3..9 (replication 3 needs 3)")
        default_dir = ROOT / ".cache" / "kafka-cluster" / str(self.port)
        self.dir = (data_dir or Path(os.environ.get("KAFKA_CLUSTER_DIR", default_dir))).resolve()
        self.version = os.environ.get("KAFKA_VERSION", "4.3.1")
        cache = Path(os.environ.get("KAFKA_CACHE_DIR", ROOT / ".cache" / "kafka"))
        self.libs = cache.resolve() / self.version / "libs"
        self.controller = Node(self, 0)
        self.brokers = [Node(self, n) for n in range(1, self.size + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def broker(self, node_id: int) -> Node:
        return self.brokers[node_id - 1]

    # -- life --------------------------------------------------------------------------------

    def up(self, timeout: float = 180) -> None:
        started = time.monotonic()
        self._fetch()
        self.dir.mkdir(parents=True, exist_ok=True)
        cluster_nodes.write_log_config(self.dir)
        for node in (self.controller, *self.brokers):
            node.write_config()
        if not (self.controller.data / "meta.properties").exists():
            cluster_id = cluster_nodes.new_cluster_id()
            say(f"formatting {self.size} brokers and the controller (cluster id {cluster_id})")
            for node in (self.controller, *self.brokers):
                node.format(cluster_id)
            (self.dir / "kafka.version").write_text(self.version + "\n")
        elif (self.dir / "kafka.version").read_text().strip() != self.version:
            raise SystemExit(f"kafka-cluster: {self.dir} holds another Kafka version: run wipe")
        self.controller.start()
        self.controller.wait_listening(timeout)
        for broker in self.brokers:
            broker.start()
        self.wait_healthy(timeout - (time.monotonic() - started))
        cluster_health.warm_up(self.bootstrap)
        say(
            f"{self.size} brokers ready on {self.bootstrap} "
            f"in {time.monotonic() - started:.0f}s (data {self.dir})"
        )

    def start_stopped(self) -> None:
        """Start every node that is not running (a test that failed mid-fault left it down)."""
        for node in (self.controller, *self.brokers):
            node.start()

    def down(self) -> None:
        for node in (*self.brokers, self.controller):
            node.stop()
        say("stopped")

    def wipe(self) -> None:
        self.down()
        if self.dir in {Path("/"), ROOT, ROOT / ".cache", Path.home()}:
            raise SystemExit(f"kafka-cluster: refusing to delete {self.dir}")
        shutil.rmtree(self.dir, ignore_errors=True)
        say(f"removed {self.dir}")

    def _fetch(self) -> None:
        if (self.libs.parent / ".fetch-complete").exists():
            return
        subprocess.run([str(KAFKA_SCRIPT), "fetch"], check=True)

    # -- health ------------------------------------------------------------------------------

    def wait_healthy(self, timeout: float, *, brokers: int | None = None) -> float:
        """Block until ``brokers`` (default all) brokers are registered and no partition,
        internal ones included, is under-replicated; returns the seconds waited. A fault test
        waits for this before each fault, so every fault meets a whole cluster."""
        want = self.size if brokers is None else brokers
        started = time.monotonic()
        last = ""
        while True:
            state = cluster_health.health(self.bootstrap)
            if state.brokers >= want and not state.under_replicated:
                return time.monotonic() - started
            last = f"{state.brokers} brokers registered, under-replicated: {state.sample}"
            for node in (self.controller, *self.brokers):
                node.check_alive()
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"cluster not healthy after {timeout:.0f}s: {last}")
            time.sleep(0.5)

    def finalized(self, feature: str) -> int:
        """The level the cluster finalized for ``feature`` (``kafka-features describe``)."""
        result = subprocess.run(
            [
                *(*self.controller.java(), "-Xmx256m", "-XX:TieredStopAtLevel=1"),
                f"-Dlog4j2.configurationFile=file:{self.dir / 'log4j2.properties'}",
                *("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", self.bootstrap),
                "describe",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in result.stdout.splitlines():
            if line.startswith(f"Feature: {feature}\t") or line.split()[1:2] == [feature]:
                return int(line.split("FinalizedVersionLevel:")[1].split()[0])
        return 0

    def status(self) -> int:
        down = 0
        for node in (self.controller, *self.brokers):
            pid = node.pid()
            down += pid is None
            print(f"{node.name} port={node.port} " + (f"pid={pid}" if pid else "not running"))
        return 3 if down else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cluster = Cluster()
    cmd = args[0] if args else "help"
    if cmd == "up":
        cluster.up()
    elif cmd == "down":
        cluster.down()
    elif cmd == "wipe":
        cluster.wipe()
    elif cmd == "status":
        return cluster.status()
    elif cmd == "bootstrap":
        print(cluster.bootstrap)
    else:
        print(__doc__)
        return 0 if cmd in {"help", "-h", "--help"} else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
