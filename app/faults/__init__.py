"""The fault tests' seams: the points the worker reaches (production's do nothing), the injected
faults that act at them, the client supplier that wraps the producers, and the skipped fetches."""
