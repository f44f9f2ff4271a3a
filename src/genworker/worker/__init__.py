"""The worker pipeline: what a digital worker runs (tasks and runs) and how a request reaches an engine."""
