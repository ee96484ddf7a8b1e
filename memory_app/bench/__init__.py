"""Benchmarks: functions that measure and return figures; commands print them."""
