"""Benchmarks run by `make bench`; each prints ratios measured in one run."""
