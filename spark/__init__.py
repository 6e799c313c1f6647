"""The lake: Spark Structured Streaming from the clean topic into Parquet, exactly once (job.py)."""
