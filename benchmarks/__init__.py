"""Benchmarks and measurements, one folder per purpose (benchmarks/README.md); their scripts run by path."""
