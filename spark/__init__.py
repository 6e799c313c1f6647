"""The lake: Spark Structured Streaming from the clean topic into Delta tables (job.py)."""
