"""Spark Structured Streaming jobs that read the clean topic into the lake (not built yet)."""
