"""commbench: communication benchmarks for distributed deep learning."""

__version__ = "0.1.0"
