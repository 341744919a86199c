"""policy_scheduler_content_cache_*: the content-keyed caches' bytes, budget, entries, evictions
and uncached results, read at scrape time from the node table, the CEL and the regex caches."""

from __future__ import annotations

from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.framework import validation
from policy_scheduler.framework.model.nodetable import NodeTable


def test_node_mask_cache_figures_are_exported():
    t = Telemetry(known_policies={"default": 1})
    table = NodeTable(mask_cache_bytes=64 << 10)
    for i in range(100):
        table.upsert_node({"metadata": {"name": f"n{i}", "labels": {"h": f"n{i}"}}, "status": {"allocatable": {"cpu": "1"}}})
    t.cache_size.table = lambda: table
    get = t.registry.get_sample_value
    assert get("policy_scheduler_content_cache_entries", {"cache": "node_masks"}) == 0
    assert get("policy_scheduler_content_cache_budget_bytes", {"cache": "node_masks"}) == 64 << 10
    for i in range(100):
        table.label_mask("h", f"n{i}")
    for i in range(1000):
        table.cached(("test", i), lambda: bytes(1000))
    st = table.mask_cache_stats()
    assert st["evictions"] > 0
    assert get("policy_scheduler_content_cache_bytes", {"cache": "node_masks"}) == st["bytes"] <= 64 << 10
    assert get("policy_scheduler_content_cache_entries", {"cache": "node_masks"}) == st["entries"]
    assert get("policy_scheduler_content_cache_evictions_total", {"cache": "node_masks"}) == st["evictions"]
    table.cached(("huge",), lambda: bytes(100_000))  # over an eighth of the budget: not kept
    assert get("policy_scheduler_content_cache_uncached_total", {"cache": "node_masks"}) == 1


def test_cel_and_regex_caches_are_exported_without_a_table():
    t = Telemetry(known_policies={})
    for i in range(40):
        validation.compile_user_regex(f"metrics-{i}-[a-z]+")
    get = t.registry.get_sample_value
    assert get("policy_scheduler_content_cache_entries", {"cache": "regexes"}) == 16
    assert get("policy_scheduler_content_cache_bytes", {"cache": "regexes"}) <= validation.REGEX_CACHE_BYTES
    assert get("policy_scheduler_content_cache_evictions_total", {"cache": "regexes"}) >= 24
    assert get("policy_scheduler_content_cache_budget_bytes", {"cache": "cel_selectors"}) > 0
    assert get("policy_scheduler_content_cache_entries", {"cache": "node_masks"}) is None
