"""Operator commands and what they share with the worker's start-up: topics (declared, created,
checked for safety), partition-count growth, snapshots, capacity plans (``python -m app ...``)."""
