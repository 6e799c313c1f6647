"""Benchmark contender (h): Kafka Streams de-duplication on a key-value store with an expiry
punctuator (``bench/contenders/kstreams_dedup.py --store kv``; the application and its settings
are described there and in ``KStreamsDedup.java``).

    python -m bench.contenders.kstreams_kv_dedup --bootstrap B --input T --output T2 \\
        --partitions P --state-dir D --group G
"""

from __future__ import annotations

import sys

from bench.contenders import kstreams_dedup


def main(argv: list[str] | None = None) -> None:
    kstreams_dedup.main([*(sys.argv[1:] if argv is None else argv), "--store", "kv"])


if __name__ == "__main__":
    main()
