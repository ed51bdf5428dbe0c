"""Load tests and benchmarks of mpbroker: locustfile.py, bench/ (see README.md)."""
