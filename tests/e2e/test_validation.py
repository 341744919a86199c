"""Validation end to end: every generated invalid policy is refused, by the API server (the CRD's
schema and CEL rules) or by the operator (Ready=False), with the field named; and no input can
block the scheduling loop (a pathological podNamePattern meets a pod named to trigger it while
another policy's pods keep binding).
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.rest import ApiException

from helpers import GROUP, PLURAL, VERSION, apply_policy, pod, wait_for
from support.invalid_policies import Case, invalid_policies, names_field, refusal_for

POLICY = "policy-scheduler.io/policy"
RUN_LABEL = "e2e-validation"


def _api_fields(e: ApiException) -> list[tuple[str, str]]:
    """(field, message) of each cause of a refusal; the whole message when it has none."""
    try:
        body = json.loads(e.body or "{}")
    except ValueError:
        return [("", str(e.body))]
    causes = (body.get("details") or {}).get("causes") or []
    out = [(c.get("field") or "", c.get("message") or "") for c in causes]
    return out or [("", body.get("message") or "")]


def _api_names_field(e: ApiException, case: Case) -> bool:
    """The API server's refusal names the case's field, a field inside it, or the list or object
    holding it (a CEL rule on ``spec.plugins`` for a duplicate name at ``spec.plugins[2].name``).
    Strict decoding (HTTP 400) names unknown fields in its message: ``unknown field "spec.x.y"``."""
    fields = []
    for fld, msg in _api_fields(e):
        fields.append(fld)
        fields += re.findall(r'unknown field "([^"]+)"', msg)
    return any(f and f not in ("spec", "<nil>") and (names_field(f + ": x", case.path)
                                                     or names_field(case.path + ": x", f)) for f in fields)


def _create_policy(policies, i: int, case: Case):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy",
            "metadata": {"name": f"val-{i:04d}", "labels": {RUN_LABEL: "bulk"}}, "spec": case.spec}
    try:
        # Strict, as kubectl: unknown fields outside args are refused, not silently dropped
        policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, body, field_validation="Strict")
        return None
    except ApiException as e:
        return e


def test_every_generated_invalid_policy_is_refused_naming_the_field(operator, policies):
    cases = invalid_policies()
    assert len(cases) >= 500
    pid = operator.proc.pid
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda ic: _create_policy(policies, *ic), enumerate(cases)))
    created_in = time.monotonic() - t0
    try:
        by_api, stored, wrong = 0, {}, []
        for i, (case, err) in enumerate(zip(cases, outcomes)):
            if err is None:
                stored[f"val-{i:04d}"] = case
            elif err.status in (400, 422):  # 400: strict decoding (unknown fields), 422: schema and CEL
                by_api += 1
                if not _api_names_field(err, case):
                    wrong.append(f"{case.name}: the API server's refusal does not name {case.path}: "
                                 f"{_api_fields(err)}")
            else:
                wrong.append(f"{case.name}: HTTP {err.status}: {err.body}")

        def statuses():
            items = policies.list_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                        label_selector=f"{RUN_LABEL}=bulk")["items"]
            out = {}
            for it in items:
                cond = next((c for c in (it.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
                            None)
                if cond is not None:
                    out[it["metadata"]["name"]] = cond
            return out if set(stored) <= set(out) else None

        conds = wait_for(statuses, 120, 0.5, what=f"the Ready condition of {len(stored)} policies")
        for name, case in stored.items():
            cond = conds[name]
            if cond["status"] != "False" or cond["reason"] != "InvalidSpec":
                wrong.append(f"{case.name}: stored and {cond['status']}/{cond['reason']}: {cond['message'][:300]}")
            elif not refusal_for(cond["message"].split("; "), case):
                wrong.append(f"{case.name}: Ready=False without naming {case.path}: {cond['message'][:300]}")
        print(f"\n{len(cases)} invalid policies: {by_api} refused by the API server, {len(stored)} stored and "
              f"reported Ready=False by the operator; created in {created_in:.1f}s, "
              f"all judged {time.monotonic() - t0:.1f}s after the first")
        assert not wrong, f"{len(wrong)} problems:\n" + "\n".join(wrong[:40])
        assert by_api > 0 and len(stored) > 0
        # the CRD's caps and CEL rules refuse these before the operator sees them
        refused_by_api = {c.name for c, err in zip(cases, outcomes) if err is not None}
        for name in ("plugins-10000", "plugins-65", "disabled-257", "duplicate-NodeName", "disabled-unlisted",
                     "weight-without-score-NodeName", "namespaceSelector-too-many-values", "nlm-regex-22",
                     "fit-too-many-ignored", "percentage-101", "scheduler-name-Policy_Scheduler"):
            assert name in refused_by_api, f"{name} was not refused by the API server"
        assert operator.proc.pid == pid and operator.proc.poll() is None, "the operator restarted or died"
    finally:
        policies.delete_collection_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector=f"{RUN_LABEL}=bulk")


# ---------------------------------------------------------------------------------------------
# no input blocks the loop

NODE_SEL = {"nodeSelector": {"e2e": "val"}}


def _bound_times(core, namespace: str, names: set[str], deadline: float) -> dict[str, float]:
    """Poll until every pod of ``names`` is bound; the time each was first seen bound."""
    seen: dict[str, float] = {}
    while time.monotonic() < deadline and len(seen) < len(names):
        now = time.monotonic()
        for p in core.list_namespaced_pod(namespace).items:
            if p.metadata.name in names and p.spec.node_name and p.metadata.name not in seen:
                seen[p.metadata.name] = now
        time.sleep(0.05)
    assert len(seen) == len(names), f"{len(names) - len(seen)} pods not bound"
    return seen


def _create(core, namespace: str, names: list[str], policy: str) -> dict[str, float]:
    """Create pods of ``policy`` at once (8 at a time); when each creation returned."""
    created: dict[str, float] = {}

    def one(nm: str) -> None:
        core.create_namespaced_pod(namespace, pod(nm, namespace, labels={POLICY: policy}, **NODE_SEL))
        created[nm] = time.monotonic()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    return created


def _rate(names: list[str], t0: float, bound: dict[str, float]) -> float:
    """Pods/s from the first creation to the last binding."""
    return len(names) / (max(bound[n] for n in names) - t0)


def test_a_pathological_pod_name_pattern_blocks_nothing(core, namespace, nodes, operator, policies):
    for i in range(4):
        nodes(f"val-n{i}", cpu="64", memory="256Gi", pods="500", labels={"e2e": "val", "pool": "regex" if i else "x"})
    fast = [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity"}, {"name": "NodeResourcesFit"}]
    apply_policy(policies, "val-fast", fast)
    # (a+)+$ against "aaaa…a-x" backtracks exponentially in a backtracking engine; RE2 answers at once
    apply_policy(policies, "val-regex", [{"name": "NodeLabelMatch", "args": {
        "podNamePattern": "(a+)+$", "nodeLabel": {"key": "pool", "value": "regex"}}}] + fast)
    for name in ("val-fast", "val-regex"):
        wait_for(lambda: (policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {})
                 .get("conditions"), 20, what=f"{name} status")
    pid = operator.proc.pid
    n, rounds = 100, 3
    try:
        warm = [f"warm-{i}" for i in range(10)]
        _create(core, namespace, warm, "val-fast")
        _bound_times(core, namespace, set(warm), time.monotonic() + 30)
        before, during, decided = [], [], []
        for r in range(rounds):  # alternate, so that a slower moment of the machine hits both
            names = [f"before-{r}-{i}" for i in range(n)]
            t0 = time.monotonic()
            _create(core, namespace, names, "val-fast")
            before.append(_rate(names, t0, _bound_times(core, namespace, set(names), t0 + 60)))

            # the same burst, with pods named to trigger the pattern created first
            evil = [f"{'a' * 247}-x{r}{i}" for i in range(3)] + ["a" * 249 + f"-x{r}"]
            names = [f"during-{r}-{i}" for i in range(n)]
            t1 = time.monotonic()
            created = _create(core, namespace, evil, "val-regex")
            t2 = time.monotonic()
            _create(core, namespace, names, "val-fast")
            bound = _bound_times(core, namespace, set(evil) | set(names), t1 + 60)
            during.append(_rate(names, t2, bound))
            decided.append(max(bound[e] - created[e] for e in evil))
        med_before, med_during = sorted(before)[rounds // 2], sorted(during)[rounds // 2]
        print(f"\nval-fast, {n} pods per burst: {med_before:.1f} pods/s before (median of "
              f"{', '.join(f'{x:.0f}' for x in before)}), {med_during:.1f} pods/s with 4 pods named 'a…a-x' under "
              f"podNamePattern (a+)+$ (median of {', '.join(f'{x:.0f}' for x in during)}); those pods were bound "
              f"at most {max(decided):.2f}s after their creation")
        assert med_during >= 0.5 * med_before, (before, during)
        assert max(decided) < 1.5, decided
        # RE2 finds at once that the names do not match: those pods are outside the workload, and
        # NodeLabelMatch lets them anywhere
        assert operator.proc.pid == pid and operator.proc.poll() is None
    finally:
        for name in ("val-fast", "val-regex"):
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
