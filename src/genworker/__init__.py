"""genworker: a filesystem-first, multi-tenant runtime for digital workers."""

__version__ = "0.1.0"
__all__ = ["__version__"]
