"""Metric sources for usage-aware plugins (Prometheus): bulk queries off the scheduling loop,
cached with their sample times, staleness per node, in-flight estimates for just-bound pods."""
