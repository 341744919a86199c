"""The allocator's partitionable devices (shared counters, per-device node selection) and
consumable capacity (allowMultipleAllocations, capacity requests, request policies, shareID and
consumedCapacity in the results), as upstream's incubating allocator (v1.37)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from support.drakit import DRIVER, DraHandle, claim, device_class, filter_all, nodes, pod, reasons_of, request
from support.kit import instance

from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources.capacity import canonical, parse_q
from policy_scheduler.plugins.dynamicresources.dynamic_resources import CANNOT_ALLOCATE, STATE_KEY, DynamicResources

C, S, D = "resourceclaims", "resourceslices", "deviceclasses"


def slice_(name, node="n0", pool="n0", devices=None, counters=None, count=1, **spec):
    s = {"driver": DRIVER, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}, **spec}
    if node and not any(k in spec for k in ("allNodes", "nodeSelector", "perDeviceNodeSelection")):
        s["nodeName"] = node
    if devices is not None:
        s["devices"] = devices
    if counters is not None:
        s["sharedCounters"] = [{"name": n, "counters": {c: {"value": v} for c, v in cs.items()}}
                               for n, cs in counters.items()]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": s}


def part(name, consumes=None, capacity=None, multi=False, **extra):
    d = {"name": name, **extra}
    if consumes:
        d["consumesCounters"] = [{"counterSet": cs, "counters": {c: {"value": v} for c, v in cnt.items()}}
                                 for cs, cnt in consumes.items()]
    if capacity:
        d["capacity"] = capacity
    if multi:
        d["allowMultipleAllocations"] = True
    return d


def cap_request(name="gpu", count=None, **caps):
    r = request(name, count=count)
    if caps:
        r["exactly"]["capacity"] = {"requests": caps}
    return r


def world(*slices, claims=(), node_names=("n0",), labels=None):
    h = DraHandle()
    h.add(D, device_class())
    h.add(S, *slices)
    h.add(C, *claims)
    return h, nodes(*node_names, labels=labels)


def run(h, t, *claim_names, name="p"):
    pl = instance(DynamicResources, None, h)
    p = pod(name, claims=list(claim_names))
    st, res, state = filter_all(pl, p, t)
    return pl, p, st, res, state


def picked(state, node="n0"):
    st = state.read(STATE_KEY)
    return [a.result for a in st.allocator.results(st.by_node[node], node)]


def names(state, node="n0"):
    return [[r["device"] for r in a["devices"]["results"]] for a in picked(state, node)]


def gpu_partitions(mem="40Gi"):
    """One GPU's counter set (memory) and four partitions: whole (40Gi), two halves, a quarter."""
    return [slice_("n0-counters", counters={"gpu-0": {"memory": mem}}, count=2),
            slice_("n0-devices", count=2, devices=[
                part("whole", {"gpu-0": {"memory": "40Gi"}}),
                part("half-0", {"gpu-0": {"memory": "20Gi"}}),
                part("half-1", {"gpu-0": {"memory": "20Gi"}}),
                part("quarter", {"gpu-0": {"memory": "10Gi"}})])]


# ---------------------------------------------------------------- shared counters

def test_counters_are_exhausted_across_devices_of_one_request():
    h, t = world(*gpu_partitions(), claims=[claim("one"), claim("two", [request(count=2)]),
                                            claim("three", [request(count=3)])])
    _, _, _, res, state = run(h, t, "one")
    assert names(state) == [["whole"]]
    _, _, _, res, state = run(h, t, "two")  # whole + anything exceeds 40Gi: both halves
    assert names(state) == [["half-0", "half-1"]]
    _, _, _, res, _ = run(h, t, "three")
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}


def test_counters_backtrack_past_a_first_fit():
    slices = [slice_("c", counters={"cs": {"n": "4"}}, count=2),
              slice_("d", count=2, devices=[part("a", {"cs": {"n": "3"}}), part("b", {"cs": {"n": "2"}}),
                                            part("c", {"cs": {"n": "2"}})])]
    h, t = world(*slices, claims=[claim("x", [request(count=2)])])
    _, _, _, _, state = run(h, t, "x")
    assert names(state) == [["b", "c"]]


def test_counters_across_claims_of_one_pod_allocated_claims_and_in_flight_claims():
    h, t = world(*gpu_partitions(), claims=[claim("a"), claim("b"), claim("c"), claim("d")])
    _, _, _, _, state = run(h, t, "a", "b")  # the pod's second claim sees the first one's counters
    assert names(state) == [["half-0"], ["half-1"]]  # whole leaves nothing for b: backtracked
    pl, p, _, _, state = run(h, t, "a")
    assert pl.reserve(state, p, "n0").is_success  # in flight: whole
    _, _, _, res, _ = run(h, t, "b", name="q")
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}
    pl.unreserve(state, p, "n0")
    # an allocated claim (the informer's view) holding a quarter leaves 30Gi
    h.cache.apply(C, "MODIFIED", claim("c", rv="2", allocation={"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "quarter"}]}}))
    h.add(C, claim("e", [request(count=2)]))
    _, _, _, _, state = run(h, t, "b", name="r")  # whole (40Gi) no longer fits
    assert names(state) == [["half-0"]]
    _, _, _, res, _ = run(h, t, "e", name="s")  # half + half = 40Gi > 30Gi left
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}


def test_counter_sets_come_from_a_slice_published_elsewhere_and_a_missing_one_leaves_the_pool_incomplete():
    counters = slice_("c", node="elsewhere", counters={"gpu-0": {"memory": "40Gi"}}, count=2)
    devices = slice_("d", count=2, devices=[part("half-0", {"gpu-0": {"memory": "20Gi"}})])
    h, t = world(counters, devices, claims=[claim("x")])
    _, _, _, _, state = run(h, t, "x")
    assert names(state) == [["half-0"]]
    h, t = world(devices, claims=[claim("x")])  # the counter slice not there yet
    _, _, _, res, _ = run(h, t, "x")
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}


@pytest.mark.parametrize("consumes", [{"nope": {"memory": "1"}}, {"gpu-0": {"nope": "1"}}])
def test_unknown_counter_sets_or_counters_make_the_pool_invalid(consumes):
    slices = [slice_("c", counters={"gpu-0": {"memory": "40Gi"}}, count=2),
              slice_("d", count=2, devices=[part("bad", consumes)])]
    h, t = world(*slices, claims=[claim("x")])
    _, _, _, res, _ = run(h, t, "x")
    assert reasons_of(res, t) == {"invalid resource pools were encountered": ["n0"]}


def test_duplicate_counter_set_names_make_the_pool_invalid():
    slices = [slice_("c0", counters={"gpu-0": {"memory": "40Gi"}}, count=3),
              slice_("c1", counters={"gpu-0": {"memory": "40Gi"}}, count=3),
              slice_("d", count=3, devices=[part("half-0", {"gpu-0": {"memory": "20Gi"}})])]
    h, t = world(*slices, claims=[claim("x")])
    _, _, _, res, _ = run(h, t, "x")
    assert reasons_of(res, t) == {"invalid resource pools were encountered": ["n0"]}


# ---------------------------------------------------------------- per-device node selection

def test_per_device_node_selection():
    s = slice_("shared", node=None, pool="fabric", perDeviceNodeSelection=True, devices=[
        part("on-n1", nodeName="n1"),
        part("zone-a", nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}]}),
        part("anywhere", allNodes=True)])
    h, t = world(s, claims=[claim("x"), claim("y", [request(count=2)])], node_names=("n0", "n1"),
                 labels={"n0": {"zone": "a"}, "n1": {"zone": "b"}})
    _, _, _, res, state = run(h, t, "x")
    assert names(state, "n0") == [["zone-a"]] and names(state, "n1") == [["on-n1"]]
    assert picked(state, "n0")[0]["nodeSelector"] == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}]}
    assert picked(state, "n1")[0]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    _, _, _, res, state = run(h, t, "y")
    assert names(state, "n1") == [["on-n1", "anywhere"]]


# ---------------------------------------------------------------- consumable capacity

def shared_gpu(cores=None, **policy):
    mem = {"value": "40Gi"}
    if policy:
        mem["requestPolicy"] = policy
    return slice_("n0", devices=[part("g0", capacity={"memory": mem, "cores": cores or {"value": "100"}}, multi=True)])


def test_a_multi_allocation_device_is_shared_with_share_ids_and_consumed_capacity():
    h, t = world(shared_gpu(), claims=[claim("a", [cap_request(memory="10Gi")]), claim("b", [cap_request(memory="30Gi")])])
    _, _, _, res, _ = run(h, t, "a", "b")  # cores not requested and without a default: each share takes all 100
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}
    h, t = world(shared_gpu({"value": "100", "requestPolicy": {"default": "10"}}),
                 claims=[claim("a", [cap_request(memory="10Gi")]), claim("b", [cap_request(memory="30Gi")]),
                         claim("c", [cap_request(memory="31Gi")]), claim("d", [cap_request(memory="30Gi", cores="90")])])
    pl, p, _, _, state = run(h, t, "a", "b")
    a, b = picked(state)
    ra, rb = a["devices"]["results"][0], b["devices"]["results"][0]
    assert ra["device"] == rb["device"] == "g0" and ra["shareID"] != rb["shareID"]
    assert ra["consumedCapacity"] == {"memory": "10Gi", "cores": "10"}
    assert rb["consumedCapacity"] == {"memory": "30Gi", "cores": "10"}
    pl, p, _, _, held = run(h, t, "a", name="q")
    assert pl.reserve(held, p, "n0").is_success  # in flight: 10Gi and 10 cores
    _, _, _, res, _ = run(h, t, "c", name="r")  # 10Gi + 31Gi > 40Gi
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}
    _, _, _, res, state = run(h, t, "d", name="s")  # 40Gi and 100 cores: exactly full
    assert names(state) == [["g0"]]
    assert h.cache.in_use((DRIVER, "n0", "g0")) and not h.cache.allocated
    assert h.cache.capacity_used[(DRIVER, "n0", "g0")] == {"memory": Decimal(10 * 2**30), "cores": Decimal(10)}
    pl.unreserve(held, p, "n0")
    assert not h.cache.in_use((DRIVER, "n0", "g0")) and not h.cache.capacity_used


def test_capacity_left_by_allocated_shares():
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0",
                                      "shareID": "1", "consumedCapacity": {"memory": "30Gi", "cores": "10"}}]}}
    pol = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    slices = [slice_("n0", devices=[part("g0", capacity={"memory": {"value": "40Gi", "requestPolicy": pol},
                                                         "cores": {"value": "100",
                                                                   "requestPolicy": {"default": "10"}}}, multi=True)])]
    h, t = world(*slices, claims=[claim("old", allocation=alloc), claim("fits", [cap_request(memory="9.5Gi")]),
                                  claim("big", [cap_request(memory="10.5Gi")]), claim("dflt")])
    _, _, _, _, state = run(h, t, "fits")  # 9.5Gi rounds up to 10Gi: 40Gi exactly
    assert picked(state)[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "10Gi", "cores": "10"}
    _, _, _, res, _ = run(h, t, "big")  # 11Gi > 10Gi left
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}
    _, _, _, _, state = run(h, t, "dflt")  # nothing requested: the defaults
    assert picked(state)[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "1Gi", "cores": "10"}


@pytest.mark.parametrize("policy,requested,consumed", [
    ({"validValues": ["10Gi", "20Gi", "40Gi"]}, "11Gi", "20Gi"),
    ({"validValues": ["10Gi", "20Gi", "40Gi"]}, "41Gi", None),  # above every value: kept, violates
    ({"validRange": {"min": "4Gi", "max": "16Gi", "step": "4Gi"}}, "1", "4Gi"),
    ({"validRange": {"min": "4Gi", "max": "16Gi", "step": "4Gi"}}, "5Gi", "8Gi"),
    ({"validRange": {"min": "4Gi", "max": "16Gi", "step": "4Gi"}}, "17Gi", None),  # rounds to 20Gi > max
    ({"validRange": {"min": "4Gi", "max": "16Gi"}}, "5000Mi", "5000Mi"),
    ({"validRange": {"min": "1", "step": "3"}}, "5", "7"),
])
def test_request_policies_round_up_or_refuse(policy, requested, consumed):
    h, t = world(shared_gpu(**policy), claims=[claim("x", [cap_request(memory=requested)])])
    _, _, _, res, state = run(h, t, "x")
    if consumed is None:
        assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]}
    else:
        assert picked(state)[0]["devices"]["results"][0]["consumedCapacity"]["memory"] == consumed


def test_a_request_for_a_capacity_the_device_lacks_skips_it_and_an_exclusive_device_checks_its_value():
    s = slice_("n0", devices=[part("small", capacity={"memory": {"value": "8Gi"}}),
                              part("big", capacity={"memory": {"value": "80Gi"}}),
                              part("other", capacity={"cores": {"value": "8"}}, multi=True)])
    h, t = world(s, claims=[claim("x", [cap_request(memory="16Gi")]), claim("y", [cap_request(cores="2")])])
    _, _, _, _, state = run(h, t, "x")
    r = picked(state)[0]["devices"]["results"][0]
    assert r["device"] == "big" and "shareID" not in r and "consumedCapacity" not in r  # exclusive: no share
    _, _, _, _, state = run(h, t, "y")
    assert names(state) == [["other"]]


def test_a_shared_device_consumes_its_counters_once():
    slices = [slice_("c", counters={"cs": {"n": "1"}}, count=2),
              slice_("d", count=2, devices=[part("s", {"cs": {"n": "1"}}, multi=True), part("x", {"cs": {"n": "1"}})])]
    h, t = world(*slices, claims=[claim("a"), claim("b"), claim("c")])
    _, _, _, _, state = run(h, t, "a", "b", "c")
    assert names(state) == [["s"], ["s"], ["s"]]


def test_distinct_attribute_spreads_shares_over_devices():
    s = slice_("n0", devices=[part("g0", multi=True, attributes={"id": {"int": 0}}),
                              part("g1", multi=True, attributes={"id": {"int": 1}})])
    h, t = world(s, claims=[claim("x", [request("a"), request("b")],
                                  constraints=[{"distinctAttribute": f"{DRIVER}/id"}]),
                            claim("y", [request("a"), request("b")])])
    _, _, _, _, state = run(h, t, "x")
    assert names(state) == [["g0", "g1"]]
    _, _, _, _, state = run(h, t, "y")  # without the constraint both requests share g0
    assert names(state) == [["g0", "g0"]]


def test_unrepresentable_request_is_an_error():
    h, t = world(shared_gpu(validRange={"min": "1", "step": "1"}),
                 claims=[claim("x", [cap_request(memory="10E")])])
    _, _, _, res, _ = run(h, t, "x")
    assert res.error is not None and res.error.code == Code.ERROR
    assert res.error.reasons[0] == (
        f'claim default/x, request gpu: checking capacity for device {DRIVER}/n0/g0: capacity "memory": capacity '
        "request cannot be represented in the device's range arithmetic: request 10E exceeds MaxInt64")


@pytest.mark.parametrize("text,canon", [("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1536Mi", "1536Mi"), ("1.5Gi", "1536Mi"),
                                        ("100", "100"), ("2000", "2k"), ("1500", "1500"), ("0.5", "500m"),
                                        ("1e3", "1e3"), ("1000Ki", "1000Ki"), ("1023", "1023"), ("0", "0"),
                                        ("1.5", "1500m"), ("12e6", "12e6")])
def test_quantities_are_written_in_upstream_canonical_form(text, canon):
    assert canonical(parse_q(text, "q")) == canon


def test_the_dra_benchmark_slices_are_partitionable_and_every_device_stays_allocatable():
    import dra_workload as dra  # bench/: on the tests' path

    h = DraHandle()
    h.add(D, device_class())
    bodies = dra.slices(0, 10)
    for b in bodies:  # the benchmark's driver, renamed to the test class's
        b["spec"]["driver"] = DRIVER
    h.add(S, *bodies)
    assert [bool(b["spec"].get("sharedCounters")) for b in bodies] == [False, True]
    h.add(C, claim("all", [request(count=10)]), claim("eleven", [request(count=11)]))
    t = nodes(dra.node_name(0))
    pl = instance(DynamicResources, None, h)
    _, res, state = filter_all(pl, pod("p", claims=["all"]), t)
    assert len(names(state, dra.node_name(0))[0]) == 10
    assert any(d.counters for s in h.cache.slices.values() for d in s.devices)
    _, res, _ = filter_all(pl, pod("q", claims=["eleven"]), t)
    assert not res.passed.any()
    # the counters are what holds: one device's memory less in a root's set leaves 9 allocatable
    counters = bodies[1]
    counters["metadata"]["resourceVersion"] = "2"
    cs = counters["spec"]["sharedCounters"][0]["counters"]["memory"]
    cs["value"] = f"{4 * dra.DEVICE_MEMORY_MI}Mi"
    h.cache.apply(S, "MODIFIED", counters)
    h.add(C, claim("nine", [request(count=9)]))
    _, res, _ = filter_all(pl, pod("r", claims=["all"]), t)
    assert not res.passed.any()
    _, res, state = filter_all(pl, pod("s", claims=["nine"]), t)
    assert res.passed.all()


@pytest.mark.parametrize("device", [
    part("x", capacity={"memory": {"value": "1e1000000"}}),
    part("x", capacity={"memory": {"value": "1", "requestPolicy": {"validValues": "no"}}}),
    part("x", capacity={"memory": "40Gi"}),
    part("x", consumes={"cs": {"n": "lots"}}),
    {"name": "x", "consumesCounters": [{"counterSet": "cs", "counters": {f"c{i}": {"value": "1"} for i in range(200)}}]},
])
def test_hostile_slices_are_refused_on_themselves(device):
    h = DraHandle()
    with pytest.raises(ValueError):
        h.cache.apply(S, "ADDED", slice_("bad", devices=[device]))
    assert not h.cache.slices


def test_a_share_with_a_hostile_consumed_capacity_counts_as_a_share_of_nothing():
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0",
                                      "shareID": "s", "consumedCapacity": {"memory": "lots", "cores": ["x"]}}]}}
    h, t = world(shared_gpu(), claims=[claim("old", allocation=alloc), claim("x", [cap_request(memory="40Gi")])])
    assert h.cache.in_use((DRIVER, "n0", "g0")) and h.cache.capacity_used[(DRIVER, "n0", "g0")] == {}
    _, _, _, _, state = run(h, t, "x")
    assert names(state) == [["g0"]]


def test_one_device_requests_take_the_first_fit_path_with_counters_and_agree_with_the_search():
    """A claim of one plain request for one device is allocated by first fit even when devices
    consume counters (the search could not backtrack to anything else); seeded worlds of
    partitions, some already taken, give the same device both ways, or nothing both ways."""
    import random

    from policy_scheduler.plugins.dynamicresources.allocator import Allocator

    rng = random.Random(45)
    seen = set()
    for case in range(60):
        sizes = [rng.choice(["5Gi", "10Gi", "20Gi", "40Gi"]) for _ in range(rng.randint(2, 7))]
        devices = [part(f"p{i}", {"gpu-0": {"memory": s}}, multi=False) for i, s in enumerate(sizes)]
        taken = [f"p{i}" for i in range(len(sizes)) if rng.random() < 0.3]
        allocated = [claim(f"t{k}", rv="2", allocation={"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": d}]}}) for k, d in enumerate(taken)]
        h, t = world(slice_("n0-counters", counters={"gpu-0": {"memory": rng.choice(["20Gi", "40Gi", "60Gi"])}},
                            count=2),
                     slice_("n0-devices", count=2, devices=devices), claims=[claim("x"), *allocated])
        cl = h.cache.claim("default", "x")
        first_fit = Allocator(h.cache, [cl])
        assert first_fit.simple is not None
        search = Allocator(h.cache, [cl])
        search.simple = None  # the depth-first search
        a, b = first_fit.allocate("n0", t.specs[0].labels), search.allocate("n0", t.specs[0].labels)
        got = [[(d.name) for _, d, _, _ in r] for r in a.picks] if a is not None else None
        want = [[(d.name) for _, d, _, _ in r] for r in b.picks] if b is not None else None
        assert got == want, (case, sizes, taken)
        free = [f"p{i}" for i in range(len(sizes)) if f"p{i}" not in taken]
        seen.add("none" if got is None else "first free" if got == [[free[0]]] else "counters skipped one")
    assert seen == {"none", "first free", "counters skipped one"}  # the worlds cover every outcome
