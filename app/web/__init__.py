"""The worker's web endpoints: status, stats, lookup, messages, metrics, and the status page."""
