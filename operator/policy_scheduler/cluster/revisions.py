"""Revisions: each valid generation of a policy recorded in the cluster as a ControllerRevision
(cache/revisions.py says what one holds), and read back when the last valid chain is gone.

Writes (the leader only, through ApiCalls): when a policy's generation is valid, its spec becomes
the policy's newest revision (a new one, or the revision of the same spec with its number bumped)
and revisions beyond ``history_limit`` are deleted. On becoming the leader every valid policy is
recorded (the previous leader may have died before it did).

Reads (every replica): at the sync point, before the first decision, ``restore_all`` LISTs the
revisions of the policies whose current generation is invalid and that have no chain (the
process that held their last valid chain is gone: a restart, an OOM kill, a failover) and gives
each the chain of its newest valid revision (PolicyStore.restore). Later, a policy in that state
is restored the same way, and the number of the revision in use is looked up for a policy that
kept its chain in memory.

All of it is a task off the scheduling loop: a failed request is logged (once per run of failures)
and tried again with backoff; scheduling never waits for it, but at the sync point (one LIST,
bounded by ``read_timeout``).

When revisions cannot be kept it is said where an operator looks, not only in the log:
``problem`` (reason, message) is set when the namespace does not exist (seen in the namespaces
informer at the sync point, or a write answered 404 for it: ``NamespaceNotFound``), when RBAC
denies a request (``Forbidden``) or when the API server refuses the LIST (``RequestFailed``); each
policy then carries it (``PolicyState.revisions_problem``), which policy_status.py writes as the
condition ``RevisionsRecorded=False``, and ``/readyz`` names it (health.py's ``revisions``
warning). Another error on one policy's write is that policy's alone. A transport error (no
answer at all) is not reported on the policies: their status cannot be written either. The
problem clears once the queued policies are handled again; the namespace appearing (``namespaces
changed``) ends a NamespaceNotFound at once and retries the writes without waiting for the backoff.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
from typing import Callable, Iterable

from ..cache import revisions as rev
from ..cache.policies import PolicyState, PolicyStore, RevisionsProblem
from .apicalls import ApiCalls, NotLeader
from .informer import Backoff
from .kubeclient import REQUEST_ERRORS, ApiError, KubeClient

log = logging.getLogger("policy_scheduler")


NAMESPACE_NOT_FOUND, FORBIDDEN, REQUEST_FAILED = "NamespaceNotFound", "Forbidden", "RequestFailed"


class Retry(Exception):
    """Try this policy again soon, quietly (a conflict with a write seen late)."""


class Revisions:
    """The ControllerRevisions of the store's policies in ``namespace``. ``history_limit``:
    revisions kept per policy (0: none written, existing ones still read). ``may_write()``: this
    replica leads. ``on_recorded(state)``: the number of the revision in use became known (the
    status shows it). ``namespace`` None: revisions are off."""

    def __init__(self, client: KubeClient, store: PolicyStore, api: ApiCalls, *, namespace: str | None,
                 history_limit: int = rev.DEFAULT_HISTORY_LIMIT, may_write: Callable[[], bool] = lambda: True,
                 on_recorded: Callable[[PolicyState], None] | None = None, backoff: Backoff | None = None,
                 read_timeout: float = 10.0) -> None:
        self.client = client
        self.store = store
        self.api = api
        self.namespace = namespace
        self.history_limit = max(0, history_limit)
        self.may_write = may_write
        self.on_recorded = on_recorded
        self.backoff = backoff or Backoff(initial=1.0, cap=60.0)
        self.read_timeout = read_timeout
        self._pending: dict[str, int] = {}  # policy -> the change it was queued for
        self._seq = itertools.count(1)
        self._wake = asyncio.Event()
        self._retry_now = asyncio.Event()  # the namespace appeared: retry without waiting for the backoff
        self.failing: str | None = None  # the last failure, while requests fail
        self.problem: RevisionsProblem | None = None  # why revisions cannot be kept, for every policy
        self.synced = False  # the namespaces are known (restore_all ran)
        self._namespace_seen: bool | None = None

    @property
    def enabled(self) -> bool:
        return self.namespace is not None

    @property
    def path(self) -> str:
        return rev.collection_path(self.namespace or "")

    # ------------------------------------------------------------------ what to do
    def policy_changed(self, st: PolicyState) -> None:
        """The store's policy changed (or was restored): record a valid generation (on the
        leader), restore a policy left without a chain, or look up the revision in use."""
        if not self.enabled or not st.uid:
            return
        if self.problem is not None and st.revisions_problem is None:
            st.revisions_problem, st.dirty = self.problem, True
        if st.ready:
            if self.history_limit and st.revision_in_use is None and self.may_write():
                self._queue(st.name)
        elif st.chain is None or st.revision_in_use is None:
            self._queue(st.name)

    def lead(self) -> None:
        """This replica leads now: record every valid policy, look up the revisions in use."""
        if not self.enabled:
            return
        for st in list(self.store.policies.values()):
            if st.uid and (st.chain is None or st.revision_in_use is None) and (self.history_limit or not st.ready):
                self._queue(st.name)

    def _queue(self, name: str) -> None:
        self._pending[name] = next(self._seq)
        self._wake.set()

    # ------------------------------------------------------------------ reads
    async def list(self, policies: Iterable[str] | None = None) -> list[rev.Revision]:
        """The revisions of these policies (all of ours: None); raises REQUEST_ERRORS."""
        names = list(policies) if policies is not None else None
        sel = rev.selector(names[0] if names is not None and len(names) == 1 else None)
        body = await self.client.get(self.path, labelSelector=sel)
        found = rev.parse_all((body or {}).get("items") or [])
        return found if names is None else [r for r in found if r.policy in names]

    def _restore(self, st: PolicyState, revisions: list[rev.Revision]) -> None:
        """Give a chainless invalid policy the chain of its newest valid revision."""
        if st.chain is not None or not st.errors:
            return
        r, problems = rev.choose(revisions, st.name, st.uid,
                                 lambda r: self.store.restore(st.name, r.spec, r.generation, r.number))
        for p in problems:
            log.warning("SchedulingPolicy %s: %s is not valid either; an older one is tried", st.name, p)
        if r is None and problems:
            log.warning("SchedulingPolicy %s: no valid revision in %s; its pods wait until it is fixed",
                        st.name, self.namespace)

    def _identify(self, st: PolicyState, revisions: list[rev.Revision]) -> None:
        """Find the number of the revision a chain kept in memory was built from (its generation)."""
        if st.chain is None or st.revision_in_use is not None:
            return
        for r in rev.of_policy(revisions, st.name, st.uid):
            if r.generation == st.chain_generation:
                st.revision, st.revision_generation, st.dirty = r.number, r.generation, True
                if self.on_recorded is not None:
                    self.on_recorded(st)
                return

    async def restore_all(self) -> None:
        """At the sync point: restore every policy whose current generation is invalid and that
        has no chain. One LIST, at most ``read_timeout``; should it fail, the policies are
        queued for the background task and the operator starts without them."""
        if not self.enabled:
            return
        self.synced = True
        self.namespaces_changed()
        names = [n for n, st in self.store.policies.items() if st.chain is None and st.errors and st.uid]
        if not names:
            return
        try:
            found = await asyncio.wait_for(self.list(names), self.read_timeout)
        except REQUEST_ERRORS as e:
            self._report(e)
            log.warning("cannot read the ControllerRevisions of SchedulingPolicies %s in %s: %s; their pods wait "
                        "until they are read (retried in the background)", ", ".join(sorted(names)),
                        self.namespace, e)
            for n in names:
                self._queue(n)
            return
        for n in names:
            st = self.store.policies.get(n)
            if st is not None:
                self._restore(st, found)

    # ------------------------------------------------------------------ writes
    async def _record(self, st: PolicyState, revisions: list[rev.Revision]) -> None:
        """Record the policy's valid generation as its newest revision; prune the history."""
        name, uid, gen = st.name, st.uid, st.generation
        spec = copy.deepcopy(st.spec_raw)
        p = rev.plan(revisions, name, uid, spec, gen, self.history_limit)
        ns = self.namespace or ""
        for n in p.delete_first:
            await self.api.delete_revision(ns, n)
        if p.create is not None:
            try:
                await self.api.create_revision(ns, p.create)
            except ApiError as e:
                if e.status == 409:  # it exists: a LIST older than a write; read again
                    raise Retry() from None
                raise
        elif p.update is not None:
            await self.api.patch_revision(ns, p.name, p.update)
        for n in p.prune:
            await self.api.delete_revision(ns, n)
        if p.create is not None or p.update is not None:
            log.info("SchedulingPolicy %s generation %d recorded as revision %d (ControllerRevision %s/%s)%s",
                     name, gen, p.number, ns, p.name, f"; {len(p.prune)} older deleted" if p.prune else "")
        cur = self.store.policies.get(name)
        if cur is st and st.uid == uid and st.chain_generation == gen:
            st.revision, st.revision_generation, st.dirty = p.number, gen, True
            if self.on_recorded is not None:
                self.on_recorded(st)

    async def _handle(self, name: str, revisions: list[rev.Revision]) -> None:
        st = self.store.policies.get(name)
        if st is None or not st.uid:
            return
        if st.ready:
            if self.history_limit and st.revision_in_use is None:
                if not self.may_write():
                    return  # recorded by the leader (this replica, once it leads: ``lead``)
                await self._record(st, revisions)
        elif st.chain is None:
            self._restore(st, revisions)
        else:
            self._identify(st, revisions)

    async def run_once(self) -> bool:
        """Handle every queued policy once; False when a request failed (they stay queued)."""
        todo = dict(self._pending)
        if not todo:
            return True
        if self.problem is not None and self.problem.reason == NAMESPACE_NOT_FOUND and \
                self.namespace not in self.store.namespaces:
            return False  # nothing can be written there: wait for its ADD (namespaces_changed)
        try:
            found = await self.list(todo)
        except REQUEST_ERRORS as e:
            self._failed(e)
            return False
        ok = True
        for name, seq in todo.items():
            try:
                await self._handle(name, found)
            except NotLeader:
                pass  # deposed: the operator is exiting; the next leader records it
            except Retry:
                ok = False
                continue
            except REQUEST_ERRORS as e:
                self._failed(e, name)
                ok = False
                if isinstance(e, ApiError) and e.status in (403, 404):
                    break  # the namespace's problem: the other policies' writes would fail alike
                continue
            st = self.store.policies.get(name)
            if st is not None and st.revisions_problem is not None and st.revisions_problem is not self.problem:
                st.revisions_problem, st.dirty = None, True  # its own write works again
            if self._pending.get(name) == seq:  # not changed again meanwhile
                del self._pending[name]
        if ok and self.failing is not None:
            log.info("ControllerRevisions in %s: requests work again", self.namespace)
            self.failing = None
        if ok and self.problem is not None and not (
                self.problem.reason == NAMESPACE_NOT_FOUND and self.namespace not in self.store.namespaces):
            self._set_problem(None)  # every queued policy handled: requests work again
        return ok

    # ------------------------------------------------------------------ saying so
    def namespaces_changed(self) -> None:
        """The namespaces informer's view changed (the engine calls this on each Namespace event):
        a missing revision namespace is a problem for every policy (revisions on); its
        appearance ends it and retries the writes at once."""
        if not self.enabled or not self.synced:
            return
        seen = self.namespace in self.store.namespaces
        if seen == self._namespace_seen:
            return
        self._namespace_seen = seen
        if not seen and self.history_limit:
            self._set_problem(self._namespace_missing())
        elif seen:
            if self.problem is not None and self.problem.reason == NAMESPACE_NOT_FOUND:
                log.info("namespace %s exists now: recording revisions again", self.namespace)
                self._set_problem(None)
            if self.may_write():
                self.lead()  # what could not be recorded is now
            self._retry_now.set()

    def _namespace_missing(self) -> RevisionsProblem:
        return RevisionsProblem(NAMESPACE_NOT_FOUND, self._message(
            "the namespace does not exist", "create it, or run with --revision-namespace naming the operator's "
            "namespace (in a pod the default is $POD_NAMESPACE, which the Deployment sets)"))

    def _message(self, what: str, fix: str) -> str:
        return (f"ControllerRevisions cannot be written in namespace {self.namespace!r}: {what}; this policy's "
                f"last valid generation is not recorded, so an invalid edit followed by a restart or a failover "
                f"leaves its pods waiting. To fix: {fix}")

    def _report(self, e: BaseException, policy: str | None = None) -> None:
        """Say on the policies (all of them, or ``policy``'s alone) why a request failed: only
        for an answer of the API server (a transport error is not the revisions' own)."""
        if not isinstance(e, ApiError):
            return
        detail = str(e)[:300]
        if e.status == 403:
            p = RevisionsProblem(FORBIDDEN, self._message(
                f"forbidden ({detail})", "grant the operator's ServiceAccount list, create, patch and delete on "
                "controllerrevisions in that namespace (manifests/09-revisions-rbac.yaml, the chart's "
                "revisions-rbac.yaml)"))
        elif e.status == 404 and policy is not None and (
                self.namespace not in self.store.namespaces
                or (isinstance(e.body, dict) and (e.body.get("details") or {}).get("kind") == "namespaces")):
            p = self._namespace_missing()
        else:
            p = RevisionsProblem(REQUEST_FAILED, self._message(f"the API server refused ({detail})",
                                                                "see the operator's log; retried with backoff"))
            if policy is not None:  # this policy's write alone
                st = self.store.policies.get(policy)
                if st is not None and st.revisions_problem != p:
                    st.revisions_problem, st.dirty = p, True
                return
        self._set_problem(p)

    def _set_problem(self, p: RevisionsProblem | None) -> None:
        """Every policy carries ``p`` (None: none any more) in its status."""
        if p == self.problem:
            return
        self.problem = p
        if p is not None:
            log.warning("SchedulingPolicies: revisions are not recorded: %s", p.message)
        for st in self.store.policies.values():
            if p is not None or st.revisions_problem is not None:
                st.revisions_problem, st.dirty = p, True

    def _failed(self, e: BaseException, policy: str | None = None) -> None:
        self._report(e, policy)
        what = f"{type(e).__name__}: {e}" if not isinstance(e, ApiError) else str(e)
        if self.failing is None:
            log.warning("ControllerRevisions in %s: %s; retried with backoff (scheduling goes on)",
                        self.namespace, what)
        else:
            log.debug("ControllerRevisions in %s: still failing: %s", self.namespace, what)
        self.failing = what

    async def run(self) -> None:
        """The background task, until cancelled."""
        if not self.enabled:
            return
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if await self.run_once():
                continue
            self._retry_now.clear()
            try:  # the backoff, cut short when the namespace appears
                await asyncio.wait_for(self._retry_now.wait(), self.backoff.next())
            except asyncio.TimeoutError:
                pass
