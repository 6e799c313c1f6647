"""Benchmarks (speed, memory, state size), reported as ratios to a baseline run alongside."""
