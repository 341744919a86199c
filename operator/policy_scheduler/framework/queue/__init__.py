"""The scheduling queue: activeQ, backoffQ and the unschedulable pool (scheduling_queue.py,
subqueues.py), what the plugins answer it (hints.py: PreEnqueue, the queueing hints) and the
nominated pods (upstream's pkg/scheduler/backend/queue)."""
