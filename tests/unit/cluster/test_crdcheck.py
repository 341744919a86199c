"""An operator newer (or older) than the installed CRD says which fields differ, and goes on."""

from __future__ import annotations

import asyncio
import copy
import logging

from policy_scheduler.policy.crd import crd
from policy_scheduler.cluster.crdcheck import CRD_PATH, check_crd, compare
from policy_scheduler.cluster.kubeclient import ApiError


class Client:
    def __init__(self, obj=None, error=None):
        self.obj, self.error = obj, error

    async def get(self, path):
        assert path == CRD_PATH
        if self.error is not None:
            raise self.error
        return self.obj


def older() -> dict:
    """The CRD of a release before spec.rollout (its status had no rollout either)."""
    c = copy.deepcopy(crd())
    schema = c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["rollout"]
    del schema["properties"]["status"]["properties"]["rollout"]
    del schema["properties"]["spec"]["properties"]["tuning"]["properties"]["maxStep"]
    return c


def test_the_same_crd_differs_in_nothing():
    assert compare(crd()) == ([], [])


def test_an_older_crd_names_what_it_lacks_at_its_top(caplog):
    caplog.set_level(logging.INFO, "policy_scheduler")
    missing, extra = asyncio.run(check_crd(Client(older())))
    # the top of each missing subtree, not every field below it
    assert missing == ["spec.rollout", "spec.tuning.maxStep", "status.rollout"] and extra == []
    (rec,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "is older than this operator" in rec.getMessage() and "spec.rollout, spec.tuning.maxStep" in rec.getMessage()
    assert "kubectl apply -f crds/schedulingpolicies.yaml" in rec.getMessage()


def test_a_newer_crd_names_what_this_operator_ignores(caplog):
    newer = copy.deepcopy(crd())
    spec = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["placementBudget"] = {"type": "object", "properties": {"max": {"type": "integer"}}}
    missing, extra = asyncio.run(check_crd(Client(newer)))
    assert (missing, extra) == ([], ["spec.placementBudget"])
    assert any(r.levelno == logging.WARNING and "newer than this operator" in r.getMessage() for r in caplog.records)


def test_without_the_crd_or_the_permission_it_says_so_and_returns(caplog):
    caplog.set_level(logging.INFO, "policy_scheduler")
    assert asyncio.run(check_crd(Client(error=ApiError(403, "forbidden")))) is None
    assert asyncio.run(check_crd(Client(error=ApiError(404, "not found")))) is None
    msgs = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any(lv == logging.INFO and "not checked" in m for lv, m in msgs)
    assert any(lv == logging.ERROR and "is not installed" in m for lv, m in msgs)
