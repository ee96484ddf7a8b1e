"""Benchmarks of the proxy (``manage.py vc_bench proxy``)."""
