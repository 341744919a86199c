"""Is the installed SchedulingPolicy CRD the one this operator was built with?

The API server prunes every field its CRD's schema does not know. An operator newer than its CRD
(an upgrade that skipped `kubectl apply -f crds/`: `helm upgrade` never upgrades CRDs) would see
the new fields of a policy silently dropped, and its own status fields too. So at start-up the
operator reads the installed CRD (GET, one object) and compares its schema with its own
(policy/crd.py): fields it knows that the installed schema lacks are named in one ERROR line, with
what to do; fields of a newer CRD it does not know are named in a WARNING. Scheduling goes on
either way: nothing here stops the operator. Without permission to read the CRD the check is
skipped, with an INFO line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterator

from ..policy.crd import crd
from ..policy.models import GROUP, PLURAL, VERSION
from .kubeclient import REQUEST_ERRORS, ApiError

log = logging.getLogger("policy_scheduler")

CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
MAX_DEPTH = 4  # spec.rollout.analysis.window: deep enough for every field a release adds


def _fields(schema: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """The dotted paths of a structural schema's properties, down to MAX_DEPTH (lists by their
    items' properties); not below a node that keeps unknown fields (its content is free)."""
    if not isinstance(schema, dict) or depth >= MAX_DEPTH or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(schema.get("items"), dict):
        yield from _fields(schema["items"], prefix, depth)
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        yield path
        yield from _fields(sub, path, depth + 1)


def _schema(obj: Any) -> dict[str, Any]:
    for v in (obj or {}).get("spec", {}).get("versions") or []:
        if v.get("name") == VERSION:
            return ((v.get("schema") or {}).get("openAPIV3Schema") or {})
    return {}


def compare(installed_crd: Any) -> tuple[list[str], list[str]]:
    """(fields this operator knows that the installed CRD lacks, fields only the installed CRD has)."""
    ours = set(_fields(_schema(crd())))
    theirs = set(_fields(_schema(installed_crd)))
    missing = sorted(f for f in ours - theirs if "." not in f or f.rsplit(".", 1)[0] in theirs)
    extra = sorted(f for f in theirs - ours if "." not in f or f.rsplit(".", 1)[0] in ours)
    return missing, extra


async def check_crd(client) -> tuple[list[str], list[str]] | None:
    """Read the installed CRD and say what differs (see the module's docstring); None when it
    could not be read."""
    try:
        obj = await client.get(CRD_PATH)
    except ApiError as e:
        if e.status == 404:
            log.error("the CRD %s is not installed: no SchedulingPolicy can be read; apply crds/ of this release",
                      CRD_NAME)
        else:
            log.info("the installed CRD %s not checked against this operator's: %s", CRD_NAME, e)
        return None
    except REQUEST_ERRORS as e:
        log.info("the installed CRD %s not checked against this operator's: %s", CRD_NAME, e)
        return None
    # building our own schema takes a quarter of a second of CPU: in a thread, not on the loop
    missing, extra = await asyncio.to_thread(compare, obj)
    if missing:
        log.error("the installed CRD %s is older than this operator: its schema lacks %s, so the API server drops "
                  "these fields from every SchedulingPolicy and its status. Apply the CRD of this release "
                  "(kubectl apply -f crds/schedulingpolicies.yaml; helm upgrade does not upgrade CRDs): "
                  "docs/operations.md#upgrades", CRD_NAME, ", ".join(missing))
    if extra:
        log.warning("the installed CRD %s is newer than this operator: it ignores %s", CRD_NAME, ", ".join(extra))
    if not missing and not extra:
        log.info("the installed CRD %s matches this operator's", CRD_NAME)
    return missing, extra
