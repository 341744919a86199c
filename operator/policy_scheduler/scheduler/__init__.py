"""The scheduling driver, pure: schedule one popped pod and submit its result (schedule_one.py),
a pod group's cycle (group_cycle.py), the pending pods' bookkeeping (pending.py), and the ports
through which it reaches the world (ports.py). The operator (cluster/) and what-if (whatif/) both
run it, each with its own implementation of the ports.
"""
