"""The scheduling writes to the API server, in one place: the Binding, the preemption victim's
DELETE, PodGroup status patches, the binding cycle's nomination for expectation, the requests
bind-side plugins make (VolumeBinding's PreBind) and a pending pod's suggestions condition.

Each write is made by the leader only: a standby, or a deposed leader, writes nothing. Each one
is fenced when it is sent: it carries the lease's deadline (``Leadership.time_left``) through the
token bucket and the token renewal, and is dropped unsent once it has passed (kubeclient's
``fence``: Fenced); the deadline is also its timeout, so no write outlives the lease. Failed
requests are told apart with kubeclient's one policy (REQUEST_ERRORS, TRANSPORT_ERRORS); a
Binding or a DELETE that got no answer is read back before it counts as failed. Events and PodScheduled conditions go through recorder.py,
policy status through policy_status.py; both use the same client and the same policy.

``OperatorActions`` is what the operator's Handle (cache/handle.py) may do beyond reading the
state: these writes, plus activating pods in the queue, a pod's event and asking whether a
preemption is still deleting its victims.

upstream: DefaultBinder's ``handle.ClientSet().CoreV1().Pods().Bind``, the preemption
Executor's victim deletion, and the API dispatcher (``backend/api_dispatcher``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping, Sequence

from ..cache.policies import PLURAL_PATH as POLICIES_PATH
from ..cache.revisions import collection_path as revisions_path
from ..framework.interface import PodGone
from ..plugins.podgroups.native_cache import api_path as native_pod_groups_path
from ..plugins.podgroups.cache import API_PATH as POD_GROUPS_PATH
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status
from .kubeclient import REQUEST_ERRORS, TRANSPORT_ERRORS, ApiError, Fenced, KubeClient
from .leader import Leadership
from .telemetry import Telemetry

log = logging.getLogger("policy_scheduler")

GATED_CONFLICT = "has non-empty .spec.schedulingGates"
DELETED, GONE, UNKNOWN = "deleted", "gone", "unknown"  # what delete_pod did
BIND_READBACK_TIMEOUT = 5.0  # seconds to read a pod back after a Binding that got no answer


class NotLeader(RuntimeError):
    """This replica does not hold the leader lease: it makes no API write."""

    def __init__(self) -> None:
        super().__init__("not the leader: no API writes")


class ApiCalls:
    """The operator's scheduling writes; ``native_version()``: the scheduling.k8s.io version
    PodGroups are served in (the engine reads discovery)."""

    def __init__(self, client: KubeClient, leadership: Leadership, telemetry: Telemetry,
                 native_version: Callable[[], str]) -> None:
        self.client = client
        self.leadership = leadership
        self.telemetry = telemetry
        self.native_version = native_version

    def _check_leader(self) -> None:
        if not self.leadership.valid():
            raise NotLeader()

    @property
    def fence(self) -> Callable[[], float | None]:
        """What every write carries to the moment it is sent: the lease's time left."""
        return self.leadership.time_left

    async def bind(self, pod: PodInfo, node: str, annotations: Mapping[str, str]) -> Status:
        """POST pods/binding (DefaultBinder through the Handle). Success; PodGone when no binding
        is needed any more; an Error status (the pod is requeued) otherwise. A 409 is told
        apart: already assigned, being deleted or replaced (a UID precondition) is PodGone; a pod
        that got scheduling gates behind our back is an error, requeued and gated on its next try."""
        t0 = time.perf_counter()
        telemetry = self.telemetry
        left = self.leadership.time_left()
        if left is not None and left <= 0:  # not (or no longer) the leader: a deposed leader never binds
            return Status.error("not bound: this replica does not hold the leader lease")
        try:
            # a leader's binding may not outlive its lease: past the renew deadline another replica
            # may lead. The fence is asked again when the request is sent (after the token bucket)
            await self.client.bind(pod.namespace, pod.name, node, uid=pod.uid or None,
                                   annotations=dict(annotations), timeout=left, fence=self.fence)
        except Fenced:
            telemetry.bind_errors.labels("fenced").inc()
            return Status.error("not bound: the leader lease's renew deadline passed before the Binding was sent")
        except ApiError as e:
            telemetry.bind_errors.labels(str(e.status)).inc()
            text = str(e)
            if e.status == 404:
                raise PodGone(f"pod {pod.key} not found: {text}") from None
            if e.status == 409:
                if GATED_CONFLICT in text:
                    return Status.error(f"Binding rejected: the pod has scheduling gates: {text}")
                if "already assigned" in text or "being deleted" in text or "UID in precondition" in text:
                    raise PodGone(text) from None
            return Status.error(f"Binding rejected: {text}")
        except TRANSPORT_ERRORS as e:
            telemetry.bind_errors.labels("transport").inc()
            # no answer: the Binding may have been carried out. Read the pod back before the
            # room it holds is given up (a pod bound here must not be unreserved meanwhile)
            where = await self._bound_to(pod)
            if where == node:
                log.info("binding %s to %s got no answer (%s) but the pod is bound there", pod.key, node,
                         type(e).__name__)
            elif where:
                raise PodGone(f"pod {pod.key} is bound to {where}") from None
            else:
                return Status.error(f"Binding failed: {type(e).__name__}: {e}")
        telemetry.binding_duration.observe(time.perf_counter() - t0)
        return Status.success()

    async def _bound_to(self, pod: PodInfo) -> str | None:
        """The node a pod is bound to, read from the API server (None: unbound, or unreadable);
        a pod gone or replaced by one of the same name raises PodGone."""
        try:
            got = await self.client.request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                                            timeout=BIND_READBACK_TIMEOUT)
        except ApiError as e:
            if e.status == 404:
                raise PodGone(f"pod {pod.key} not found") from None
            return None
        except TRANSPORT_ERRORS:
            return None
        meta = got.get("metadata") if isinstance(got, dict) else None
        spec = got.get("spec") if isinstance(got, dict) else None
        if not isinstance(meta, dict):
            return None
        if pod.uid and meta.get("uid") != pod.uid:
            raise PodGone(f"pod {pod.key} was replaced")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        return node if isinstance(node, str) and node else None

    async def patch_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        """The binding cycle's nomination for expectation (upstream updatePod with
        NominatingInfo{node, ModeOverride}): a strategic-merge PATCH of the pod's status setting
        ``nominatedNodeName``, awaited before WaitOnPermit and PreBind. The leader only; a
        failure is logged and changes nothing (upstream: not critical enough to stop binding)."""
        if not self.leadership.valid():
            return
        try:
            await self.client.strategic_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                                              {"status": {"nominatedNodeName": node}}, fence=self.fence)
        except REQUEST_ERRORS as e:
            log.warning("Failed to update the nominated node name in the binding cycle: pod %s, "
                        "nominatedNodeName %s: %s", pod.key, node, e)

    async def delete_pod(self, pod: PodInfo) -> str | None:
        """DELETE a preemption victim, with its uid as precondition, fenced by the lease (its
        deadline is also the request's timeout): DELETED; GONE when it was gone already or
        replaced by a pod of the same name (404, 409); UNKNOWN when the request got no answer (it
        may have been carried out: ``victim_state`` tells); None when it was not deleted (this
        replica does not lead, the fence dropped it unsent, or the API server refused: logged)."""
        if not self.leadership.valid():
            return None
        try:
            await self.client.request("DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                                      {"apiVersion": "v1", "kind": "DeleteOptions",
                                       **({"preconditions": {"uid": pod.uid}} if pod.uid else {})},
                                      fence=self.fence)
        except Fenced:
            log.warning("preemption victim %s not deleted: the leader lease's renew deadline passed", pod.key)
            return None
        except ApiError as e:
            if e.status in (404, 409):  # gone already, or replaced by a pod of the same name
                return GONE
            log.warning("preemption victim %s not deleted: %s", pod.key, e)
            return None
        except TRANSPORT_ERRORS as e:
            log.warning("preemption victim %s: DELETE got no answer (%s: %s); reading the pod back",
                        pod.key, type(e).__name__, e)
            return UNKNOWN
        return DELETED

    async def patch_pod_condition(self, pod: PodInfo, condition: Mapping[str, Any]) -> bool | None:
        """Strategic-merge PATCH of one condition of a pod's status (merged by its type), with the
        pod's UID in the patch as a precondition (a pod replaced under the same name refuses it:
        the UID is immutable). Through pods/status, which the shipped ClusterRole grants (as
        kube-scheduler's does, for PodScheduled). The leader only, fenced. True when written;
        None when the API server forbids it (403); False otherwise (not leading, fenced, the pod
        gone, replaced or bound meanwhile, or refused: the caller counts it). Raises nothing."""
        if not self.leadership.valid():
            return False
        body: dict[str, Any] = {"status": {"conditions": [dict(condition)]}}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        try:
            await self.client.strategic_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", body,
                                              fence=self.fence)
        except Fenced:
            return False
        except REQUEST_ERRORS as e:
            if isinstance(e, ApiError) and e.status == 403:
                return None
            if not (isinstance(e, ApiError) and e.status in (404, 409, 422)):  # gone, or replaced
                log.warning("condition %s of pod %s not written: %s", condition.get("type"), pod.key, e)
            return False
        return True

    async def victim_state(self, pod: PodInfo) -> str | None:
        """After a DELETE that got no answer: GET the victim. DELETED when it is terminating, GONE
        when it is gone or replaced; None when it is there, not deleting, or cannot be read (the
        preemption then counts as failed, and its preemptor is tried again)."""
        try:
            got = await self.client.request("GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except ApiError as e:
            return GONE if e.status == 404 else None
        except TRANSPORT_ERRORS:
            return None
        meta = got.get("metadata") if isinstance(got, dict) else None
        if not isinstance(meta, dict):
            return None
        if pod.uid and meta.get("uid") != pod.uid:
            return GONE
        return DELETED if meta.get("deletionTimestamp") else None

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request for a bind-side plugin; a PATCH is a merge patch. The leader only; a
        write is fenced (a GET is not: it changes nothing)."""
        self._check_leader()
        method = method.upper()
        ct = "application/merge-patch+json" if method == "PATCH" else "application/json"
        fence = None if method == "GET" else self.fence
        if method == "DELETE" and body is None:  # a body, so the fence is asked when it is written too
            body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        return await self.client.request(method, path, body, content_type=ct, fence=fence)

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge PATCH of a scheduler-plugins PodGroup's status subresource; the leader only (a
        standby's call raises NotLeader, and the writer keeps the group for later)."""
        self._check_leader()
        await self.client.merge_patch(f"{POD_GROUPS_PATH.rsplit('/', 1)[0]}/namespaces/{namespace}/"
                                      f"podgroups/{name}/status", {"status": dict(status)}, fence=self.fence)

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge PATCH of a scheduling.k8s.io PodGroup's status (its conditions); the leader only."""
        self._check_leader()
        path = native_pod_groups_path(self.native_version())
        await self.client.merge_patch(f"{path.rsplit('/', 1)[0]}/namespaces/{namespace}/podgroups/{name}/status",
                                      {"status": dict(status)}, fence=self.fence)

    async def patch_policy(self, name: str, patch: Mapping[str, Any]) -> None:
        """Merge PATCH of a SchedulingPolicy (a rollout's promotion); the leader only."""
        self._check_leader()
        await self.client.merge_patch(f"{POLICIES_PATH}/{name}", dict(patch), fence=self.fence)

    async def create_revision(self, namespace: str, body: Mapping[str, Any]) -> None:
        """POST a policy's ControllerRevision; the leader only. Failures raise (REQUEST_ERRORS)."""
        self._check_leader()
        await self.client.post(revisions_path(namespace), dict(body), fence=self.fence)

    async def patch_revision(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge PATCH of a ControllerRevision (its number, its generation annotation); the leader only."""
        self._check_leader()
        await self.client.merge_patch(f"{revisions_path(namespace)}/{name}", dict(patch), fence=self.fence)

    async def delete_revision(self, namespace: str, name: str) -> None:
        """DELETE a ControllerRevision (gone already is fine); the leader only."""
        self._check_leader()
        try:
            await self.client.request("DELETE", f"{revisions_path(namespace)}/{name}",
                                      {"apiVersion": "v1", "kind": "DeleteOptions"}, fence=self.fence)
        except ApiError as e:
            if e.status != 404:
                raise


class OperatorActions:
    """The operator's side of the Handle (cache/handle.Actions): the API writes above, the
    queue's activation (``activate``: keys -> how many moved), a pod's Warning event
    (``event``), a Normal one (``normal``: pod, reason, note) and the preemptor's ``is_running``
    (upstream IsPodRunningPreemption)."""

    def __init__(self, api: ApiCalls, activate: Callable[[Sequence[str]], int],
                 event: Callable[[PodInfo, str, str, Code], None], is_running: Callable[[str], bool],
                 spawn: Callable[[Any], Any] | None = None,
                 normal: Callable[[PodInfo, str, str], None] | None = None) -> None:
        self.api = api
        self._normal = normal
        self._spawn = spawn
        self._activate = activate
        self._event = event
        self._is_running = is_running

    async def bind_pod(self, pod: PodInfo, node_name: str, annotations: Mapping[str, str]) -> Status:
        return await self.api.bind(pod, node_name, annotations)

    async def api_request(self, method: str, path: str, body: Any = None) -> Any:
        return await self.api.request(method, path, body)

    async def nominate_for_expectation(self, pod: PodInfo, node_name: str) -> None:
        await self.api.patch_nominated_node_name(pod, node_name)

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self.api.patch_pod_group_status(namespace, name, status)

    async def patch_native_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self.api.patch_native_pod_group_status(namespace, name, status)

    def activate_pods(self, keys: Sequence[str]) -> int:
        return self._activate(keys)

    def pod_event(self, pod: PodInfo, reason: str, message: str) -> None:
        self._event(pod, reason, message, Code.UNSCHEDULABLE)

    def pod_normal_event(self, pod: PodInfo, reason: str, message: str) -> None:
        if self._normal is not None:
            self._normal(pod, reason, message)

    def is_pod_running_preemption(self, uid: str) -> bool:
        return self._is_running(uid)

    def spawn(self, coro: Any) -> None:
        """A plugin's background API write (DynamicResources): a task of the engine's, whose
        failure is logged."""
        if self._spawn is None:
            coro.close()
            return

        async def logged():
            try:
                await coro
            except Exception as e:  # noqa: BLE001 - upstream only logs these
                log.warning("background API write failed: %s", e)

        self._spawn(logged())
