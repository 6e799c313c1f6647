"""Command-line tools around the worker: demo stream, verifier, local broker helpers."""
