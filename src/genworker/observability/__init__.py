"""Observability: Prometheus metrics, structured logs and request ids."""
