"""Tests of ``tables.store.TransactionalStore`` on real rocksdict databases, by feature."""
