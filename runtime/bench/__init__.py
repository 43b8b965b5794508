"""Benchmarks that print Loom figures next to a peer measured in the same run."""
