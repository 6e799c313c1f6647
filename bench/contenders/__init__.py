"""Benchmark contenders: the same de-duplication job on other stream processors.

Each is a module run as ``python -m bench.contenders.<name> --bootstrap B --input T --output T2
--partitions P --state-dir D --group G``: it reads T from the earliest offset, writes the first
copy of each messageId to T2 (same key and value bytes) and runs until SIGTERM.
"""
