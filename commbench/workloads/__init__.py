"""Workloads: what a run measures, on top of the shared harness (commbench/harness.py)."""
