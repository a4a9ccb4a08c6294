"""Realistic workloads used by the demo, the benchmarks and the tests."""
