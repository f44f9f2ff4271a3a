"""Observability: Prometheus metrics, structured logs, request ids and component status."""
