"""Exactly-once event de-duplication worker (Faust + Kafka transactions + RocksDB)."""
