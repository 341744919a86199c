"""The one check of a SchedulingPolicy spec: ``validate``, called by the policy store
(cache/policies.py) for every generation it reads and by the admission webhook
(cluster/admission.py) for every create and update, so that both say the same, word for word.

In order, each step only on what the one before accepted:

1. the limits of a spec as a whole (policy/limits.py: depth, size, strings, lists, keys), before
   anything else reads it;
2. the models (policy/models.py, tuning.py, rollout.py): types, caps, the fields' own rules;
3. the namespaceSelector, parsed as the API server does (framework/model/labels.py);
4. the chain (policy/chain.py: names, ``disabled``, each plugin's ``Args`` and constructor,
   weights, one QueueSort);
5. spec.tuning's bounds against that chain (policy/tuning.py);
6. spec.rollout's candidate chain (policy/rollout.py).

Every problem is one ``"spec.<path>: <detail>"`` line (the limits' and the selector's carry their
own path); at most MAX_ERRORS (policy/errors.py) are reported per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..framework.cycle.chain import Chain
from ..framework.interface import Handle
from ..framework.model.labels import LabelSelector, SelectorError
from ..framework.registry import Registry
from .chain import ChainError, build_chain
from .errors import PolicyInvalid
from .limits import spec_problem
from .models import SchedulingPolicySpec
from .rollout import candidate_chain
from .tuning import chain_problems


@dataclass(frozen=True)
class Validated:
    """A spec that passed: its model, its namespaceSelector (None: every namespace), its chain and
    spec.rollout's candidate chain (None without a rollout)."""

    spec: SchedulingPolicySpec
    namespace_selector: LabelSelector | None
    chain: Chain
    candidate: Chain | None


def validate(spec: Any, registry: Registry | None = None, handle: Handle | None = None, *,
             raise_bugs: bool = False) -> Validated | list[str]:
    """``spec`` (a SchedulingPolicy's decoded ``spec``) checked and built, or its problems.

    ``registry``: the plugins chains are built from (the built-in ones unless given).
    ``handle``: the Handle of the chain's plugins (a fresh one unless given: a chain only judged).
    A plugin constructor's bug (an exception other than ValueError or TypeError) is a problem
    ``spec: cannot build the chain: ...``; with ``raise_bugs`` it is raised instead (the store,
    whose informer reports a handler's failure and relists)."""
    unreadable = spec_problem(spec)
    if unreadable is not None:
        return [unreadable]
    if registry is None:
        from ..plugins import default_registry
        registry = default_registry()
    try:
        return _build(spec, registry, handle if handle is not None else Handle())
    except PolicyInvalid as e:
        return e.errors
    except Exception as e:
        if raise_bugs:
            raise
        return [f"spec: cannot build the chain: {type(e).__name__}: {e}"]


def _build(spec: Any, registry: Registry, handle: Handle) -> Validated:
    """Steps 2 to 6 of the module's doc; PolicyInvalid lists every problem of the first step that
    has some."""
    try:
        parsed = SchedulingPolicySpec.model_validate(spec or {})
        ns_selector = (None if parsed.namespace_selector is None else LabelSelector.parse(
            parsed.namespace_selector.model_dump(by_alias=True, exclude_none=True), "spec.namespaceSelector"))
        chain = build_chain(parsed.chain_spec(), registry, handle=handle)
        if parsed.tuning is not None:
            bad = chain_problems(parsed.tuning, chain)
            if bad:
                raise PolicyInvalid(bad)
        candidate = None if parsed.rollout is None else candidate_chain(parsed.rollout, registry, handle)
    except ValidationError as e:
        raise PolicyInvalid([f"{'.'.join(['spec', *(str(x) for x in err['loc'])])}: {err['msg']}"
                             for err in e.errors()]) from None
    except ChainError as e:
        raise PolicyInvalid([f"spec.{x}" for x in e.errors]) from None
    except SelectorError as e:
        raise PolicyInvalid([str(e)]) from None
    return Validated(parsed, ns_selector, chain, candidate)
