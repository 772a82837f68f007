"""Benchmarks of pallas_viz: run `python -m benchmarks.run` (see benchmarks/README.md)."""
