"""Tests of ``tables.seen_ids`` on a real RocksDB store, by feature."""
