"""The transactions Kafka's own tool (``kafka-transactions list``) sees open: the verifier's
last check, that no transaction of the app is left Ongoing or Prepare* after a run."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

KAFKA_SCRIPT = Path(__file__).resolve().parent / "kafka-local.sh"


def open_transactions(
    bootstrap: str, prefix: str, java_properties: Mapping[str, str] | None = None
) -> list[str] | None:
    """Transactional ids starting with ``prefix`` whose state is Ongoing/Prepare* (kafka-tools).
    ``java_properties``: the Java client's security configs (passed as --command-config)."""
    if not KAFKA_SCRIPT.exists():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".properties") as config:  # mode 0600
        config.write("".join(f"{k}={_escaped(v)}\n" for k, v in (java_properties or {}).items()))
        config.flush()
        result = subprocess.run(
            [
                *(str(KAFKA_SCRIPT), "transactions", "--bootstrap-server", bootstrap),
                *("--command-config", config.name, "list"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if result.returncode != 0:
        return None
    out = []
    for line in result.stdout.splitlines()[1:]:
        parts = line.split()
        if (
            parts
            and parts[0].startswith(prefix)
            and parts[-1]
            not in {
                "Empty",
                "CompleteCommit",
                "CompleteAbort",
            }
        ):
            out.append(f"{parts[0]}={parts[-1]}")
    return out


def _escaped(value: str) -> str:
    """A value as a Java .properties file spells it (backslashes escaped, one line)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")
