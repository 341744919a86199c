"""DeviceTaintRules and binding conditions (resource.k8s.io/v1) on the real API server: the operator
alone first (a rule keeps a pod without a toleration off the device it taints; a pod whose device
has binding conditions is bound only once the driver reports them, and fails as upstream when it
reports a failure), then against kube-scheduler v1.37.1 on seeded cases.

The seeded cases are those of test_dra_parity.py (dra_world.py), with for each world 0-3
DeviceTaintRules on its own pools (selecting a pool, a pool's device, or driver, pool and device;
effect NoSchedule, NoExecute or None), and some devices with a binding condition
(``example.com/attached``) and a binding failure condition (``example.com/attach-failed``). A
driver thread plays the DRA driver for every world alike: when a claim is allocated a device with
binding conditions, it writes the device's entry in the claim's ``status.devices`` with the
condition True, or, for a device marked to fail, the failure condition True the first time
(PreBind fails; the next attempt finds the claim unavailable, PostFilter deallocates it, and the
pod is tried again). Where upstream's two runs agree, ours must: each pod's node, its claims'
devices and reservations, and its FailedScheduling messages (a generated claim's random suffix
left out). The suite passes at 95% of the pods compared (the acceptance of issue 45)."""

from __future__ import annotations

import os
import random
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dra_world import (BOUND_CONDITION, DEALLOCATED, DRIVER, FAILED_CONDITION, LABEL_BATCH, LABEL_RUN, RESOURCE,
                       TAINT_KEY, ZONES, Case, Device, Poller, Raw, World, WorldOutcome, cleanup, claim_spec,
                       create_classes, create_infra, delete_classes, make_case, node_body, pod_body, slice_body)
from test_dra_parity import (ADMIN_ACCESS, MAX_NODES, OURS, UPSTREAM, batches, dra_components, raw,  # noqa: F401
                             who_bound)

SEED = int(os.environ.get("DRA_RULES_SEED", "20261129"))
CASES = int(os.environ.get("DRA_RULES_CASES", "24"))
BINDING_FAILED = "device binding failed"
RULE_KINDS = ("pool", "device", "driver-pool-device")
EFFECTS = ("NoSchedule", "NoExecute", "None")
REQUIRED = {f"rule:{k}" for k in RULE_KINDS} | {f"rule-effect:{e}" for e in EFFECTS} | {"binding:ok", "binding:fail"}


# ---------------------------------------------------------------------------------------------
# the cases

@dataclass
class Rule:
    kind: str  # RULE_KINDS
    node: int
    device: int  # for kinds with a device
    effect: str


@dataclass
class RulesCase(Case):
    rules: list[Rule] = field(default_factory=list)

    def features(self) -> set[str]:
        f = super().features()
        f |= {f"rule:{r.kind}" for r in self.rules} | {f"rule-effect:{r.effect}" for r in self.rules}
        f |= {f"binding:{d.binding}" for n in self.nodes for d in (n.devices or []) if d.binding}
        return f

    def describe(self) -> str:
        rules = "; ".join(f"{r.kind} n{r.node}" + (f" gpu-{r.device}" if r.kind != "pool" else "") + f" {r.effect}"
                          for r in self.rules)
        return f"{super().describe()} rules [{rules}]"


def make_rules_case(rng: random.Random, must: str, k: int) -> RulesCase:
    """Case ``k``: its first rule goes round the selector kinds and effects, and every other case
    has a device with binding conditions (every fourth one that fails once)."""
    base = make_case(rng, must)
    with_devices = [i for i, n in enumerate(base.nodes) if n.devices]
    for i in with_devices:
        for d in base.nodes[i].devices:
            r = rng.random()
            d.binding = "ok" if r < 0.10 else "fail" if r < 0.15 else None
    rules = []
    if with_devices:
        if k % 2 == 0:
            i = rng.choice(with_devices)
            rng.choice(base.nodes[i].devices).binding = "fail" if k % 4 == 0 else "ok"
        i = rng.choice(with_devices)
        rules.append(Rule(RULE_KINDS[k % 3], i, rng.randrange(len(base.nodes[i].devices)), EFFECTS[(k // 3) % 3]))
        for _ in range(rng.choice((0, 0, 1, 2))):
            i = rng.choice(with_devices)
            rules.append(Rule(rng.choice(RULE_KINDS), i, rng.randrange(len(base.nodes[i].devices)),
                              rng.choices(EFFECTS, weights=(5, 2, 2))[0]))
    return RulesCase(base.nodes, base.pods, rules)


class RulesWorld(World):
    """A world whose pods may be refused by PreBind (a binding failure) and tried again."""

    RETRIED = (DEALLOCATED, BINDING_FAILED)

    def settles(self, p) -> bool:
        return True

    def rules(self) -> list[dict]:
        out = []
        for k, r in enumerate(self.case.rules):
            pool = f"{self.node_names[r.node]}-gpu"
            sel: dict = {"pool": pool}
            if r.kind != "pool":
                sel["device"] = f"gpu-{r.device}"
            if r.kind == "driver-pool-device":
                sel["driver"] = DRIVER
            out.append(rule_body(f"drap-{self.tag}-r{k}", sel, r.effect, self.labels))
        return out

    def binding_devices(self) -> dict[tuple[str, str], str]:
        """(pool, device) -> "ok" or "fail", for the driver."""
        return {(f"{name}-gpu", f"gpu-{i}"): d.binding for name, n in zip(self.node_names, self.case.nodes)
                for i, d in enumerate(n.devices or []) if d.binding}


def rule_body(name: str, selector: dict, effect: str, labels: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name, "labels": labels},
            "spec": {"deviceSelector": selector, "taint": {"key": TAINT_KEY, "value": "true", "effect": effect}}}


# ---------------------------------------------------------------------------------------------
# the driver

class Driver:
    """Writes status.devices for every claim of the run allocated a device with binding
    conditions: ``example.com/attached`` True, or for a device marked "fail", the first time,
    ``example.com/attach-failed`` True."""

    def __init__(self, raw: Raw, ns: str, run: str, interval: float = 0.2):
        self.raw, self.ns, self.run, self.interval = raw, ns, run, interval
        self.kinds: dict[tuple[str, str], str] = {}
        self.failed: set[tuple[str, str]] = set()
        self.writes: list[tuple[str, str, str]] = []  # (claim, device, condition)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dra-driver", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> "Driver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - a slow API server: try again
                self.error = e
            self._stop.wait(self.interval)

    def step(self) -> None:
        claims = self.raw.req("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims",
                              query={"labelSelector": f"{LABEL_RUN}={self.run}"})["items"]
        for c in claims:
            st = c.get("status") or {}
            results = ((st.get("allocation") or {}).get("devices") or {}).get("results") or []
            have = {(d["driver"], d["pool"], d["device"]) for d in st.get("devices") or ()}
            add = []
            for r in results:
                if not r.get("bindingConditions") or (r["driver"], r["pool"], r["device"]) in have:
                    continue
                key = (r["pool"], r["device"])
                fail = self.kinds.get(key) == "fail" and key not in self.failed
                if fail:
                    self.failed.add(key)
                cond = FAILED_CONDITION if fail else BOUND_CONDITION
                add.append({"driver": r["driver"], "pool": r["pool"], "device": r["device"], "conditions": [
                    {"type": cond, "status": "True", "reason": "Failed" if fail else "Attached",
                     "message": "the device could not be attached" if fail else "attached",
                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]})
                self.writes.append((c["metadata"]["name"], r["device"], cond))
            if add:
                self.raw.req("PATCH", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{c['metadata']['name']}/status",
                             {"metadata": {"resourceVersion": c["metadata"]["resourceVersion"]},
                              "status": {"devices": list(st.get("devices") or []) + add}}, patch=True,
                             missing_ok=True)


# ---------------------------------------------------------------------------------------------
# the operator alone

def _wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def _events(raw: Raw, ns: str, pod: str) -> list[str]:
    evs = raw.req("GET", f"/api/v1/namespaces/{ns}/events",
                  query={"fieldSelector": f"involvedObject.name={pod},reason=FailedScheduling"})["items"]
    return [e.get("message") or "" for e in evs]


def test_operator_taint_rules_and_binding_conditions(cluster, core, namespace, operator, example_policies, raw):
    run = secrets.token_hex(2)
    labels = {LABEL_RUN: run, LABEL_BATCH: f"{run}-op"}
    classes = create_classes(raw)
    node = f"drap-op-{run}"
    ns = namespace
    try:
        raw.create("/api/v1/nodes", node_body(node, "8", ZONES[0], {**labels, "drap-world": node}))
        devs = [Device("t4", "16Gi", "pci0", None).body(i) for i in range(2)]
        devs.append(Device("t4", "16Gi", "pci0", None, binding="ok").body(2))
        raw.create(f"{RESOURCE}/resourceslices", slice_body(node, node, f"{node}-gpu", devs, labels))
        # gpu-0 and gpu-1 tainted by rules (by pool and device; by driver, pool and device)
        for k, sel in enumerate(({"pool": f"{node}-gpu", "device": "gpu-0"},
                                 {"driver": DRIVER, "pool": f"{node}-gpu", "device": "gpu-1"})):
            raw.create(f"{RESOURCE}/devicetaintrules", rule_body(f"{node}-r{k}", sel, "NoSchedule", labels))

        def claim_and_pod(name: str, kind: str) -> None:
            raw.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "labels": labels}, "spec": claim_spec(kind)})
            raw.create(f"/api/v1/namespaces/{ns}/pods", pod_body(name, ns, OURS, "100m", {"drap-world": node},
                                                                 [{"name": "g0", "resourceClaimName": name}], labels))

        def pod_node(name):
            return raw.req("GET", f"/api/v1/namespaces/{ns}/pods/{name}")["spec"].get("nodeName")

        def claim_obj(name):
            return raw.req("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")

        # a toleration: the first device, tainted by a rule
        claim_and_pod("tol", "tol")
        _wait(lambda: pod_node("tol"), 30, "the tolerating pod bound")
        assert [r["device"] for r in claim_obj("tol")["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
        # no toleration: not gpu-1 (tainted), but gpu-2, which has a binding condition: allocated and
        # reserved, the pod not bound until the driver reports the condition
        claim_and_pod("plain", "any")
        _wait(lambda: (claim_obj("plain").get("status") or {}).get("reservedFor"), 30, "the claim allocated")
        c = claim_obj("plain")
        r = c["status"]["allocation"]["devices"]["results"]
        assert [(x["device"], x.get("bindingConditions")) for x in r] == [("gpu-2", [BOUND_CONDITION])]
        time.sleep(6)  # more than PreBind's poll interval
        assert not pod_node("plain")
        driver = Driver(raw, ns, run)
        driver.kinds = {(f"{node}-gpu", "gpu-2"): "ok"}
        driver.step()
        _wait(lambda: pod_node("plain"), 30, "the pod bound once the binding condition is True")
        # a third pod: no device left without a taint (gpu-2 is taken): refused
        claim_and_pod("none", "any")
        msgs = _wait(lambda: _events(raw, ns, "none"), 30, "FailedScheduling of the third pod")
        assert "1 cannot allocate all claims" in msgs[0], msgs
        # the rule on gpu-1 deleted: the third pod gets it
        raw.req("DELETE", f"{RESOURCE}/devicetaintrules/{node}-r1")
        _wait(lambda: pod_node("none"), 30, "the pod bound once the rule is gone")
        assert [x["device"] for x in claim_obj("none")["status"]["allocation"]["devices"]["results"]] == ["gpu-1"]
        # a binding failure: the plain pod's device marked to fail for a new claim
        raw.req("DELETE", f"/api/v1/namespaces/{ns}/pods/plain", query={"gracePeriodSeconds": "0"})
        _wait(lambda: raw.req("GET", f"/api/v1/namespaces/{ns}/pods/plain", missing_ok=True) is None, 30,
              "the plain pod gone")
        raw.req("PATCH", f"{RESOURCE}/namespaces/{ns}/resourceclaims/plain/status",
                {"status": {"reservedFor": None, "allocation": None, "devices": None}}, patch=True)
        raw.req("PATCH", f"{RESOURCE}/namespaces/{ns}/resourceclaims/plain",
                {"metadata": {"finalizers": None}}, patch=True)
        raw.req("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims/plain")
        driver.kinds = {(f"{node}-gpu", "gpu-2"): "fail"}
        driver.start()
        try:
            claim_and_pod("fails", "any")
            msgs = _wait(lambda: [m for m in _events(raw, ns, "fails") if BINDING_FAILED in m], 60,
                         "the binding failure")
            assert msgs[0] == ('running PreBind plugin "DynamicResources": device binding failed: claim=fails, '
                               'reason=Failed, message="the device could not be attached"'), msgs
            # tried again: the claim freed by PostFilter, allocated afresh, the condition met this time
            _wait(lambda: pod_node("fails"), 60, "the pod bound after the failure")
            assert any(DEALLOCATED in m for m in _events(raw, ns, "fails"))
        finally:
            driver.stop()
    finally:
        raw.req("DELETE", f"{RESOURCE}/devicetaintrules", query={"labelSelector": f"{LABEL_RUN}={run}"})
        cleanup(raw, ns, labels[LABEL_BATCH])
        delete_classes(raw, classes)


# ---------------------------------------------------------------------------------------------
# against kube-scheduler

def probe_rules(raw: Raw, poller: Poller, ns: str, run: str, batch: str, schedulers: list[str],
                timeout: float = 60) -> None:
    """dra_world.probe with rules: a node and slice made after every other of the batch, whose
    first devices (one per scheduler) rules made after every world's taint; each scheduler's
    probe pod must get an untainted device there: it has seen the batch's slices, classes and
    rules."""
    labels = {LABEL_RUN: run, LABEL_BATCH: batch}
    name = f"drap-{batch}-probe"
    n = len(schedulers)
    raw.create("/api/v1/nodes", node_body(name, "8", ZONES[0], {**labels, "drap-world": name}))
    raw.create(f"{RESOURCE}/resourceslices", slice_body(name, name, name, [
        Device("t4", "16Gi", "pci0", None).body(i) for i in range(2 * n)], labels))
    for i in range(n):
        raw.create(f"{RESOURCE}/devicetaintrules", rule_body(f"{name}-r{i}", {"pool": name, "device": f"gpu-{i}"},
                                                             "NoSchedule", labels))
    time.sleep(1.0)
    for i, sched in enumerate(schedulers):
        pname = f"{name}-{i}"
        raw.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": pname, "labels": labels}, "spec": claim_spec("any")})
        raw.create(f"/api/v1/namespaces/{ns}/pods", pod_body(
            pname, ns, sched, "100m", {"drap-world": name}, [{"name": "g0", "resourceClaimName": pname}], labels))
    for i, sched in enumerate(schedulers):
        pname = f"{name}-{i}"
        poller.wait(lambda pods, refused, p=pname: (pods.get(p) or {}).get("spec", {}).get("nodeName"), timeout,
                    f"{sched} to bind its probe pod {pname}")
        claim = raw.req("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{pname}")
        got = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
        assert got and int(got[0].split("-")[1]) >= n, f"{sched} gave its probe a device a rule taints: {got}"


_GENERATED = re.compile(r"(claim=<tag>-p\d+-g\d+)-[a-z0-9]{5}\b")


def normalized(out):
    """The outcome with a generated claim's random suffix left out of the messages."""
    if not isinstance(out, WorldOutcome):
        return out
    pods = tuple(type(p)(tuple(_GENERATED.sub(r"\1", x) if isinstance(x, str) else x for x in p.placed), p.gated,
                         p.claims) for p in out.pods)
    return WorldOutcome(pods, out.ties, out.decided)


def run_batch(raw, poller, driver, namespace, run, b, cases, idx, results) -> None:
    batch = f"{run}-b{b}"
    worlds = {(i, w): RulesWorld(cases[i], f"{run}-{i}{w}", OURS if w == "c" else UPSTREAM, namespace, run, batch)
              for i in idx for w in "abc"}
    try:
        for w in worlds.values():
            driver.kinds.update(w.binding_devices())
            for body in w.rules():
                raw.create(f"{RESOURCE}/devicetaintrules", body)
        create_infra(raw, list(worlds.values()))
        probe_rules(raw, poller, namespace, run, batch, [UPSTREAM, OURS])
        with ThreadPoolExecutor(max_workers=len(worlds)) as pool:
            futures = {key: pool.submit(w.run, raw, poller, 120) for key, w in worlds.items()}
            for key, f in futures.items():
                try:
                    results[key] = normalized(f.result())
                except AssertionError as e:
                    results[key] = f"failed: {e}"
    finally:
        raw.req("DELETE", f"{RESOURCE}/devicetaintrules", query={"labelSelector": f"{LABEL_BATCH}={batch}"})
        cleanup(raw, namespace, batch)


def compare(cases, results):
    """(pods compared, pods agreeing, per-case lines, disagreements): per case up to ours' first tie."""
    pods = agree = 0
    lines, bad = [], []
    for i, case in enumerate(cases):
        up1, up2, ours = results[(i, "a")], results[(i, "b")], results[(i, "c")]
        if not isinstance(up1, WorldOutcome) or not isinstance(up2, WorldOutcome):
            lines.append(f"  case {i}: upstream did not finish ({up1 if isinstance(up1, str) else up2})")
            continue
        n = len(case.pods)
        if isinstance(ours, WorldOutcome) and True in ours.ties:
            n = ours.ties.index(True)
        same_up = [j for j in range(n) if up1.upto(n)[j] == up2.upto(n)[j]]
        if not isinstance(ours, WorldOutcome):
            pods += len(same_up)
            lines.append(f"  case {i}: ours did not finish: {ours}")
            bad.append(f"case {i} (seed {SEED}): {case.describe()}\n    ours {ours}")
            continue
        o = ours.upto(n)
        ok = [j for j in same_up if o[j] == up1.upto(n)[j]]
        pods += len(same_up)
        agree += len(ok)
        lines.append(f"  case {i}: {len(ok)}/{len(same_up)} pods same (of {n} compared, {len(case.pods)} in all)")
        if len(ok) < len(same_up):
            diffs = [f"    pod {j}: upstream {up1.upto(n)[j]}\n           ours     {o[j]}"
                     for j in same_up if j not in ok]
            bad.append(f"case {i} (seed {SEED}): {case.describe()}\n" + "\n".join(diffs))
    return pods, agree, lines, bad


def test_rules_and_binding_conditions_as_kube_scheduler(cluster, core, namespace, operator, example_policies,
                                                        dra_components, raw):
    from dra_world import KINDS
    rng = random.Random(SEED)
    kinds = list(KINDS)
    cases = [make_rules_case(rng, kinds[(i * 7) % len(kinds)], i) for i in range(CASES)]
    covered = set().union(*(c.features() for c in cases))
    assert CASES < 12 or REQUIRED <= covered, f"seed {SEED} leaves out {sorted(REQUIRED - covered)}"
    core.patch_namespace(namespace, {"metadata": {"labels": {ADMIN_ACCESS: "true"}}})
    run = secrets.token_hex(2)
    groups = batches(cases, MAX_NODES - len(core.list_node().items) - 1)
    classes = create_classes(raw)
    poller = Poller(raw, namespace, run).start()
    driver = Driver(raw, namespace, run).start()
    results: dict = {}
    t0 = time.monotonic()
    try:
        for b, idx in enumerate(groups):
            run_batch(raw, poller, driver, namespace, run, b, cases, idx, results)
    finally:
        driver.stop()
        poller.stop()
        delete_classes(raw, classes)
    wrong = who_bound(cases, results)
    assert not wrong, "\n".join(wrong)
    pods, agree, lines, bad = compare(cases, results)
    writes = {cond: sum(1 for *_, c in driver.writes if c == cond) for cond in (BOUND_CONDITION, FAILED_CONDITION)}
    first = [p for (i, w), out in results.items() if w == "a" and isinstance(out, WorldOutcome) for p in out.pods]
    failed_then_bound = sum(1 for p in first if any(BINDING_FAILED in str(x) for x in p.placed) and "node" in p.placed)
    waited = sum(1 for p in first for c in p.claims if c[1] and "bindingConditions" in str(c[1]))
    print(f"\nDRA rules and binding conditions: {CASES} cases (seed {SEED}) in {len(groups)} batches, "
          f"{time.monotonic() - t0:.0f}s; pods where upstream agrees with itself: {pods}; ours the same on {agree}"
          f" = {100.0 * agree / pods if pods else 0:.1f}%; the driver wrote {writes}; upstream's first runs: "
          f"{waited} claims with binding conditions at the end, {failed_then_bound} pods bound after a binding failure")
    print("\n".join(lines))
    if bad:
        print("disagreements:\n" + "\n".join(bad))
    assert writes[BOUND_CONDITION] and writes[FAILED_CONDITION], "no pod waited for (or failed) a binding condition"
    assert pods >= CASES * 2, "\n".join(lines)
    assert agree >= 0.95 * pods, "\n".join(bad)
