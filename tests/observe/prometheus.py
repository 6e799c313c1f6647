"""A real Prometheus server for the observe tier (Debian's ``prometheus`` package, installed by
``scripts/servers.sh install``): started on a fixed port with a config the test writes, asked
through its HTTP API, stopped at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
#: The tier's Prometheus port (below the ephemeral range, distinct from every other tier's).
PORT = int(os.environ.get("DEDUPE_TEST_PROMETHEUS_PORT", "19490"))


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise AssertionError(
            f"{name} is not installed: `make servers-install` (or scripts/servers.sh install, "
            "as root) installs Debian's prometheus package"
        )
    return found


class Prometheus:
    """One server scraping ``targets`` (job name -> host:port list) every second and
    evaluating ``RULES`` every second."""

    def __init__(self, workdir: Path, targets: dict[str, list[str]]) -> None:
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{PORT}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": hosts}]}
                for job, hosts in targets.items()
            ],
        }
        # JSON is YAML: no YAML writer needed.
        (workdir / "prometheus.yml").write_text(json.dumps(config, indent=2))
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary("prometheus"),
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{PORT}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready in {timeout:.0f}s"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr``: each series' labels and value."""
        return [
            {"labels": s["metric"], "value": float(s["value"][1])}
            for s in self.api("query", query=expr)["result"]
        ]

    def alerts(self, name: str) -> dict[str, str]:
        """The active alerts named ``name``: instance -> state ("pending" or "firing")."""
        return {
            a["labels"].get("instance", ""): a["state"]
            for a in self.api("alerts")["alerts"]
            if a["labels"]["alertname"] == name
        }
