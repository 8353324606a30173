"""Benchmarks: ours beside the peers, in one run; `python -m bench` runs them all."""
