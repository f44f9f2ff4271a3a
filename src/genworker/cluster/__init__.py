"""Several runtime processes on one workspace and one Redis: which process owns which worker."""

from genworker.cluster.ownership import (
    CLAIM_PREFIX,
    LiveInstances,
    Ownership,
    RedisLiveInstances,
    rendezvous_owner,
    worker_key,
)

__all__ = ["CLAIM_PREFIX", "LiveInstances", "Ownership", "RedisLiveInstances", "rendezvous_owner", "worker_key"]
