"""The scheduling and binding cycles: the plugin chain of a policy, the runtime that calls,
times and words the plugins, schedule_one (its PreFilter and Filter in filtering.py) and its
Decision, and the binding cycle's plugin runs (upstream's pkg/scheduler/framework/runtime and
schedule_one.go)."""
