"""cluster/multikueue.py's pure parts: which Workloads wait for a nomination, the policy a Workload
names, and its pods (the chooser itself runs against real control planes in
tests/e2e/test_multikueue_workers.py)."""

from __future__ import annotations

import pytest

from policy_scheduler.cluster.multikueue import MAX_PODS, policy_of, to_nominate, workload_pods


def wl(status=None, labels=None, podsets=None):
    return {"metadata": {"name": "job-a-1f2e3", "namespace": "team", "labels": labels or {}},
            "spec": {"podSets": podsets if podsets is not None else [
                {"name": "main", "count": 3, "template": {
                    "metadata": {"labels": {"policy-scheduler.io/policy": "binpack", "app": "a"}},
                    "spec": {"schedulerName": "policy-scheduler", "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}}]},
            "status": status or {}}


RESERVED = {"conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admissionChecks": [{"name": "mk", "state": "Pending"}]}


@pytest.mark.parametrize("status, want", [
    (RESERVED, True),
    ({**RESERVED, "conditions": [{"type": "QuotaReserved", "status": "False"}]}, False),  # no quota yet
    ({**RESERVED, "nominatedClusterNames": ["w1"]}, False),  # nominated already
    ({**RESERVED, "clusterName": "w1"}, False),  # running somewhere
    ({**RESERVED, "admissionChecks": [{"name": "mk", "state": "Ready"}]}, False),
    ({**RESERVED, "admissionChecks": [{"name": "other", "state": "Pending"}]}, False),  # not a MultiKueue check
    ({**RESERVED, "conditions": RESERVED["conditions"] + [{"type": "Finished", "status": "True"}]}, False),
    ({"conditions": None, "admissionChecks": "junk"}, False),
])
def test_to_nominate_follows_the_incremental_dispatchers_guards(status, want):
    assert to_nominate(wl(status), {"mk"}) is want


def test_the_policy_comes_from_the_workload_then_its_template_then_the_default():
    assert policy_of(wl(labels={"policy-scheduler.io/policy": "spread"}), "default") == "spread"
    assert policy_of(wl(), "default") == "binpack"
    assert policy_of(wl(podsets=[{"name": "main", "count": 1, "template": {"spec": {}}}]), "default") == "default"


def test_pods_are_each_podsets_template_count_times():
    pods = workload_pods(wl(podsets=wl()["spec"]["podSets"] + [
        {"name": "workers", "count": 2, "template": {"spec": {"containers": [{"name": "w"}]}}}]))
    assert [p["metadata"]["name"] for p in pods] == [
        "job-a-1f2e3-main-0", "job-a-1f2e3-main-1", "job-a-1f2e3-main-2",
        "job-a-1f2e3-workers-0", "job-a-1f2e3-workers-1"]
    assert {p["metadata"]["namespace"] for p in pods} == {"team"}
    assert pods[0]["metadata"]["labels"]["app"] == "a"
    assert pods[0]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}
    # the template is copied once per PodSet (not once per pod): each pod has its own spec dict,
    # sharing what is below it; the Workload's own template is never touched
    pods[0]["spec"]["nodeName"] = "n1"
    assert "nodeName" not in pods[1]["spec"]
    assert pods[0]["spec"]["containers"] is pods[1]["spec"]["containers"]
    pods[0]["spec"]["containers"][0]["name"] = "changed"
    assert wl()["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["name"] == "c"


def test_a_workload_with_too_many_pods_is_refused():
    with pytest.raises(ValueError, match=f"more than {MAX_PODS} pods"):
        workload_pods(wl(podsets=[{"name": "main", "count": MAX_PODS + 1, "template": {}}]))


@pytest.mark.parametrize("podsets, needle", [
    ({"main": 1}, "not a list of objects"),
    (["junk"], "not a list of objects"),
    ([{"name": "main", "count": "3", "template": {}}], "count is not a count: '3'"),
    ([{"name": "main", "count": -1, "template": {}}], "count is not a count: -1"),
    ([{"name": "main", "count": 1, "template": ["x"]}], "template is not an object"),
])
def test_a_malformed_workload_says_which_field(podsets, needle):
    with pytest.raises(ValueError, match=needle):
        workload_pods(wl(podsets=podsets))


def test_pods_take_the_workloads_priority_never_their_templates():
    """Kueue resolves spec.priority; a template's own number is what a tenant wrote (the worker's
    admission would refuse it): a simulation with it would preempt what the real pods cannot."""
    w = wl()
    w["spec"]["priority"] = 1000
    assert {p["spec"]["priority"] for p in workload_pods(w)} == {1000}
    w["spec"]["podSets"][0]["template"]["spec"]["priority"] = 2_000_000_000
    assert {p["spec"]["priority"] for p in workload_pods(w)} == {1000}
    del w["spec"]["priority"]
    assert all("priority" not in p["spec"] for p in workload_pods(w))


def test_the_bytes_of_a_workloads_pods_are_bounded_before_anything_is_copied():
    """count × serialized template, summed over the PodSets: 1,000 pods of a 1 MiB template would
    be a GB of pod objects (and their simulation), every evaluation."""
    big = {"spec": {"containers": [{"name": "c", "env": [{"name": "X", "value": "x" * 100_000}]}]}}
    with pytest.raises(ValueError, match="template size over"):
        workload_pods(wl(podsets=[{"name": "main", "count": 400, "template": big}]))  # 40 MB > 32 MiB
    assert len(workload_pods(wl(podsets=[{"name": "main", "count": 300, "template": big}]))) == 300
    with pytest.raises(ValueError, match="template size over 1000000 bytes"):  # summed over PodSets
        workload_pods(wl(podsets=[{"name": "a", "count": 6, "template": big},
                                  {"name": "b", "count": 6, "template": big}]), max_bytes=1_000_000)


def test_pods_of_a_podset_share_one_parsed_template():
    import tracemalloc

    big = {"spec": {"containers": [{"name": "c", "env": [{"name": "X", "value": "x" * 100_000}]}]}}
    tracemalloc.start()
    try:
        pods = workload_pods(wl(podsets=[{"name": "main", "count": 300, "template": big}]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(pods) == 300
    assert peak < 3_000_000, peak  # one copy of 100 KB (and its serialization), not 300 (30 MB)


@pytest.mark.parametrize("count", [True, 1.5, "2"])
def test_a_count_that_is_not_an_integer_is_refused(count):
    with pytest.raises(ValueError, match="count is not a count"):
        workload_pods(wl(podsets=[{"name": "main", "count": count, "template": {}}]))
