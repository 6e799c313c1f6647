"""The JVMs of scripts/kafka_cluster.py: one node's config, format, start and stop. Node 0 is
the KRaft controller; nodes 1..N are brokers. The cluster's health: kafka_cluster_health.py."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scripts.kafka_cluster import Cluster

CONTROLLER_ID = 100

LOG4J2 = """\
status = warn
name = kafka-cluster
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
logger.tools.name = org.apache.kafka.clients
logger.tools.level = WARN
rootLogger.appenderRef.out.ref = STDOUT
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

#: Broker settings beyond the listeners: Kafka's production guarantees, stated outright so a
#: reader sees them (several are Kafka's defaults already), and what makes four JVMs fit on
#: two cores.
BROKER_PROPS = {
    "auto.create.topics.enable": "false",
    "num.partitions": "8",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # two cores: fewer internal partitions and threads, a small cleaner buffer for small heaps
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "8388608",
    "broker.heartbeat.interval.ms": "500",
}

CONTROLLER_KEYS = (
    "num.partitions",
    "default.replication.factor",
    "min.insync.replicas",
    "unclean.leader.election.enable",
)

HEAP = {"controller": "-Xms192m -Xmx192m", "broker": "-Xms320m -Xmx320m"}


def new_cluster_id() -> str:
    """16 random bytes in unpadded base64url, not starting with '-' (StorageTool refuses it)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def write_log_config(directory: Path) -> None:
    (directory / "log4j2.properties").write_text(LOG4J2)


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Node:
    """One JVM of the cluster; its files in ``<cluster dir>/<name>/``."""

    def __init__(self, cluster: Cluster, node_id: int) -> None:
        self.cluster = cluster
        self.id = CONTROLLER_ID if node_id == 0 else node_id
        self.role = "controller" if node_id == 0 else "broker"
        self.name = "controller" if node_id == 0 else f"broker-{node_id}"
        self.port = cluster.port + node_id
        self.home = cluster.dir / self.name
        self.data = self.home / "data"
        self.props = self.home / "server.properties"
        self.log = self.home / "server.log"
        self.pid_file = self.home / "pid"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proxied_port(self) -> int:
        """The broker's listener behind the fault proxy (with ``proxied``)."""
        return self.port + 10

    @property
    def proxy_port(self) -> int:
        """The port that listener advertises: where the fault proxy listens."""
        return self.port + 20

    def write_config(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        voters = f"{CONTROLLER_ID}@127.0.0.1:{self.cluster.port}"
        props = {
            "process.roles": self.role,
            "node.id": str(self.id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.data),
        }
        if self.role == "controller":
            props["listeners"] = f"CONTROLLER://{self.address}"
            props["listener.security.protocol.map"] = "CONTROLLER:PLAINTEXT"
            # A broker that stops heartbeating (kill -9) is fenced after 4 s, not 9.
            props["broker.session.timeout.ms"] = "4000"
            # Topic defaults and leader elections are the controller's in KRaft.
            props.update({k: BROKER_PROPS[k] for k in CONTROLLER_KEYS})
        else:
            props["listeners"] = f"PLAINTEXT://{self.address}"
            props["advertised.listeners"] = f"PLAINTEXT://{self.address}"
            props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            if self.cluster.proxied:
                # A second listener whose advertised port is a fault proxy's (which forwards to
                # the listener): clients bootstrapped there reach this broker only through the
                # proxy, while the brokers and the controller talk directly.
                props["listeners"] += f",PROXIED://127.0.0.1:{self.proxied_port}"
                props["advertised.listeners"] += f",PROXIED://127.0.0.1:{self.proxy_port}"
                props["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
            props["inter.broker.listener.name"] = "PLAINTEXT"
            props.update(BROKER_PROPS)
        lines = ["# Written by scripts/kafka_cluster.py (rewritten on every start)."]
        self.props.write_text("\n".join([*lines, *(f"{k}={v}" for k, v in props.items())]) + "\n")

    def java(self) -> list[str]:
        java_home = os.environ.get("JAVA_HOME")
        java = f"{java_home}/bin/java" if java_home else "java"
        return [java, "-Djava.awt.headless=true", "-cp", f"{self.cluster.libs}/*"]

    def format(self, cluster_id: str) -> None:
        """``kafka-storage format`` with no feature overrides: the release's defaults."""
        result = subprocess.run(
            [
                *self.java(),
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile=file:{self.cluster.dir / 'log4j2.properties'}",
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(self.props),
                "--ignore-formatted",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(f"kafka-cluster: formatting {self.name} failed:\n{result.stdout}")

    def pid(self) -> int | None:
        """The pid of this node's JVM, if it runs (checked against its command line)."""
        try:
            pid = int(self.pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            return None
        if b"kafka.Kafka" in cmdline and str(self.props).encode() in cmdline and state != "Z":
            return pid
        return None

    def start(self) -> None:
        if self.pid() is not None:
            return
        if listening(self.port):
            raise SystemExit(f"kafka-cluster: port {self.port} is taken by another program")
        for lock in self.data.glob("**/.lock"):
            lock.unlink()
        if self.log.exists():
            self.log.replace(self.log.with_suffix(".log.prev"))
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                [
                    *self.java(),
                    *HEAP[self.role].split(),
                    "-XX:+UseG1GC",
                    "-XX:MaxGCPauseMillis=20",
                    f"-Dkafka.logs.dir={self.home}",
                    f"-Dlog4j2.configurationFile=file:{self.cluster.dir / 'log4j2.properties'}",
                    "kafka.Kafka",
                    str(self.props),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # terminal signals to the caller do not reach it
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")

    def signal(self, sig: int) -> int:
        """Send ``sig`` to the JVM (fault tests: SIGKILL, SIGSTOP, SIGCONT); returns its pid."""
        pid = self.pid()
        if pid is None:
            raise RuntimeError(f"{self.name} is not running")
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            self._reap(pid, 30)
        return pid

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (a broker's controlled shutdown moves its leaders away), SIGKILL after
        ``timeout`` seconds."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGTERM)
        if not self._reap(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            self._reap(pid, 30)

    def _reap(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            elif self.pid() is None:
                return True
            time.sleep(0.1)
        return False

    def check_alive(self) -> None:
        """Fail loudly when a JVM this process started died (a start-up error, not a wait)."""
        if self._proc is not None and self._proc.poll() is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"kafka-cluster: {self.name} exited:\n" + "\n".join(tail))

    def wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            self.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"kafka-cluster: {self.name} not listening after {timeout:.0f}s")
            time.sleep(0.3)
