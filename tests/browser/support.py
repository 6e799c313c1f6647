"""Harness of the browser tier: the page's own web server (another origin than the ingest's)
and headless Chromium.

``make browser-install`` puts Debian's ``chromium`` on the machine and, in ``.cache/browser``
(git-ignored), the pinned npm packages of ``tests/browser/package.json`` and
``analytics.js``: ``tests/browser/page.js`` bundled with Segment's SDK by esbuild.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support import ROOT

BUNDLE = Path(ROOT) / ".cache" / "browser" / "analytics.js"

PAGE_HTML = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>browser tier</title></head>
<body><script src="/analytics.js"></script></body></html>
"""

#: Headless Chromium with nothing of its own on the network (no updates, sync, QUIC or
#: background requests) and a fresh profile, so the only requests are the page's.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
)


@dataclass
class PageServer:
    """Serves the page and its bundle on 127.0.0.1:``port`` and keeps what the page posts to
    ``/report`` (a same-origin request: no CORS involved)."""

    port: int
    reports: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        reports = self.reports
        bundle = BUNDLE.read_bytes()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._answer(200, "text/html; charset=utf-8", PAGE_HTML)
                elif path == "/analytics.js":
                    self._answer(200, "text/javascript", bundle)
                else:
                    self._answer(404, "text/plain", b"not found")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                reports.append(json.loads(body))
                self._answer(204, "text/plain", b"")

            def _answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_report(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.reports:
            if time.monotonic() > deadline:
                raise AssertionError(f"the page reported nothing within {timeout}s")
            time.sleep(0.2)
        return self.reports[0]

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError("no chromium on PATH: run `make browser-install`")


@dataclass
class Chromium:
    """Headless Chromium showing one URL, in its own process group so that stopping it stops
    its renderer and helper processes too."""

    url: str
    profile: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", self.url],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
