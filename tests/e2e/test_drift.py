"""No silent drift, on the real control plane (issue 41, builds 6 and 7).

- Revisions say when they cannot be kept: an operator run with ``--revision-namespace`` naming a
  namespace that does not exist shows ``RevisionsRecorded=False`` (NamespaceNotFound, naming the
  namespace) on every policy, and ``/readyz?verbose`` names it as a warning (readiness is kept);
  once the namespace is created the condition clears and the revisions are written.
- A watch handler that raises makes its informer relist: the pods informer's handler is made to
  raise on one pod (``POLICY_SCHEDULER_TEST_HANDLER_FAULT``, informer.py's fault-injection hook:
  the API server validates Pods too strictly for a real object to make the handler raise). The
  failures are counted and logged with the pod's name; the relist meant to repair it fails on it
  again, so it is quarantined and ``/readyz``'s ``informer/pods`` fails; the pod is then deleted
  while its handler still raises, and the next relist reports the deletion: the node's room is
  free again (no ghost), a pod needing it is bound, and the check passes again.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

from kubernetes import client
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

import localcluster
from conftest import OperatorProcess, wait_served
from helpers import FAST_ELECTION, GROUP, PLURAL, VERSION, apply_policy, example_plugins, pod, policy_status, wait_for

SCHED = "drift-sched"
FAULT = "drift.policy-scheduler.io/raise"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


def revisions_condition(policies, name: str) -> dict | None:
    return next((c for c in policy_status(policies, name).get("conditions") or []
                 if c.get("type") == "RevisionsRecorded"), None)


def test_without_its_namespace_every_policy_says_revisions_are_off_until_the_namespace_exists(
        cluster, api, core, crd, policies):
    wait_served(api, crd)
    apps = client.AppsV1Api(api)
    missing = f"drift-revisions-{uuid.uuid4().hex[:6]}"
    names = ["drift-a", "drift-b", "drift-c"]
    port = localcluster.free_port()
    op = OperatorProcess(cluster, SCHED, extra=["--revision-namespace", missing, "--health-port", str(port),
                                                "--health-address", "127.0.0.1", *FAST_ELECTION])
    try:
        op.start()
        for n in names:
            apply_policy(policies, n, example_plugins("binpack"), schedulerName=SCHED)

        def all_off():
            conds = {n: revisions_condition(policies, n) for n in names}
            return conds if all(c and c["status"] == "False" for c in conds.values()) else None

        t0 = time.monotonic()
        conds = wait_for(all_off, 30, what="RevisionsRecorded=False on every policy")
        print(f"\n  RevisionsRecorded=False on {len(names)} policies {time.monotonic() - t0:.1f}s after their creation")
        for n, c in conds.items():
            assert c["reason"] == "NamespaceNotFound", c
            assert c["message"].startswith(f"ControllerRevisions cannot be written in namespace {missing!r}: the "
                                           "namespace does not exist"), c["message"]
            assert "--revision-namespace" in c["message"]
            assert policy_status(policies, n).get("revision") is None
            assert any(x["type"] == "Ready" and x["status"] == "True"
                       for x in policy_status(policies, n)["conditions"])  # scheduling is unaffected

        code, body = get(f"http://127.0.0.1:{port}/readyz?verbose")
        assert code == 200 and body.endswith("readyz check passed\n"), body  # a warning, not a failure
        assert f"[+]revisions warning: NamespaceNotFound: ControllerRevisions cannot be written in namespace " \
               f"{missing!r}" in body, body
        assert get(f"http://127.0.0.1:{port}/readyz/revisions")[1].startswith("warning: NamespaceNotFound")
        assert "revisions are not recorded" in op.log()

        # the namespace appears: the writes are retried at once, the conditions clear
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=missing)))
        t0 = time.monotonic()

        def recovered():
            return all(revisions_condition(policies, n) is None and policy_status(policies, n).get("revision") == 1
                       for n in names)

        wait_for(recovered, 30, what="the conditions cleared and revision 1 recorded")
        print(f"  recovered {time.monotonic() - t0:.1f}s after the namespace was created")
        recorded = apps.list_namespaced_controller_revision(missing, label_selector="policy-scheduler.io/policy")
        assert sorted(r.metadata.labels["policy-scheduler.io/policy"] for r in recorded.items) == names
        code, body = get(f"http://127.0.0.1:{port}/readyz?verbose")
        assert code == 200 and "[+]revisions ok\n" in body, body
    finally:
        op.stop()
        for n in names:
            try:
                policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n)
            except ApiException:
                pass
        try:
            core.delete_namespace(missing)
        except ApiException:
            pass


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    code, text = get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_a_watch_handler_that_raises_makes_the_informer_relist_and_the_cache_repairs(
        cluster, api, core, crd, policies, namespace, nodes):
    wait_served(api, crd)
    policy = "drift-fit"
    apply_policy(policies, policy, [{"name": "NodeResourcesFit"}], schedulerName=SCHED)
    node = nodes("drift-n", cpu="1", labels={"e2e": "drift"})
    # a pod bound to the node (by another scheduler): 900m of its 1 CPU
    core.create_namespaced_pod(namespace, pod("ghost", namespace, cpu="900m", scheduler="default-scheduler",
                                              nodeName=node))
    hport, mport = localcluster.free_port(), localcluster.free_port()
    op = OperatorProcess(cluster, SCHED, env={"POLICY_SCHEDULER_TEST_HANDLER_FAULT": FAULT},
                         extra=["--health-port", str(hport), "--health-address", "127.0.0.1",
                                "--metrics-port", str(mport), "--metrics-address", "127.0.0.1",
                                "--default-policy", policy, "--leader-elect=false"])
    readyz = f"http://127.0.0.1:{hport}/readyz"
    try:
        op.start()
        wait_for(lambda: get(readyz)[0] == 200, 30, what="the operator ready")
        key = f"{namespace}/ghost"

        # the handler raises on the pod's update: counted, logged with the pod's name, relisted;
        # the relist's handler raises on it too: quarantined, and readiness says so
        t0 = time.monotonic()
        core.patch_namespaced_pod("ghost", namespace, {"metadata": {"annotations": {FAULT: "yes"}}})
        code, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(get(readyz + "?verbose")), 30,
                              what="readyz failing on informer/pods")
        print(f"\n  informer/pods failing {time.monotonic() - t0:.1f}s after the pod changed")
        assert "[-]informer/pods failed: reason withheld\n" in body and "[+]informer/nodes ok\n" in body, body
        code, why = get(readyz + "/informer/pods")
        assert code == 500 and f"the handler raised again on {key} in the relist meant to repair it: " \
                               "InjectedFault" in why, why
        log = op.log()
        assert f"pods informer: handler failed on MODIFIED {key} (resourceVersion " in log, log[-3000:]
        print("  " + next(line for line in log.splitlines() if "handler failed on MODIFIED" in line)[:240])
        assert "relisting to repair the cache after a handler failure" in log
        assert f"pods informer: handler failed again on ADDED {key}" in log and "quarantined" in log
        m = scrape(mport)
        assert m[("policy_scheduler_informer_handler_errors_total", (("informer", "pods"),))] >= 2
        assert m[("policy_scheduler_informer_relists_total", (("informer", "pods"), ("reason", "handler_error")))] >= 1
        assert m[("policy_scheduler_informer_quarantined_objects", (("informer", "pods"),))] == 1

        # deleted while its handler still raises: the DELETED event fails too; the next relist
        # reports the deletion and the node's room is free again
        core.delete_namespaced_pod("ghost", namespace, grace_period_seconds=0)
        t0 = time.monotonic()
        core.create_namespaced_pod(namespace, pod("after", namespace, cpu="900m", scheduler=SCHED,
                                                  nodeSelector={"e2e": "drift"}))
        placed = wait_for(lambda: core.read_namespaced_pod("after", namespace).spec.node_name, 30,
                          what="the pod bound in the room the ghost held")
        print(f"  the deleted pod's room free and a pod bound there {time.monotonic() - t0:.1f}s after the deletion")
        assert placed == node
        assert f"pods informer: handler failed on DELETED {key}" in op.log()
        wait_for(lambda: get(readyz)[0] == 200, 10, what="readyz passing again")
        code, body = get(readyz + "?verbose")
        assert "[+]informer/pods ok\n" in body, body
        m = scrape(mport)
        errors = m[("policy_scheduler_informer_handler_errors_total", (("informer", "pods"),))]
        relists = m[("policy_scheduler_informer_relists_total", (("informer", "pods"), ("reason", "handler_error")))]
        assert errors >= 3 and relists >= 2
        assert m[("policy_scheduler_informer_quarantined_objects", (("informer", "pods"),))] == 0
        print(f"  {errors:.0f} handler errors, {relists:.0f} relists")
    finally:
        op.stop()
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, policy)
        except ApiException:
            pass
