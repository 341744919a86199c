"""The scheduling queue: activeQ, backoffQ and the unschedulable pool, queueing hints and the
nominated pods (upstream's pkg/scheduler/backend/queue)."""
