"""A SchedulingPolicy: its models, its limits, its chain and how it is validated, in one place.

The entry point is ``validate(spec, registry)`` (policy/check.py): a ``Validated`` (the parsed
spec, its namespaceSelector, its chain and spec.rollout's candidate chain) or the list of field
errors. The policy store (cache/policies.py) and the admission webhook (cluster/admission.py)
both call it. Where each kind of check lives:

- limits.py: a spec as a whole (depth, size, strings, lists, keys), before anything reads it;
- models.py, fields.py: the spec's fields (types, caps, patterns); status.py: the status's;
- chain.py: the plugin chain (names, ``disabled``, each plugin's ``Args`` and constructor,
  weights, one QueueSort);
- tuning.py: spec.tuning (its model and its bounds against the plugins and the chain);
- rollout.py: spec.rollout (its model and its candidate's chain);
- errors.py: pydantic's errors as ``"<path>: <detail>"`` lines, and PolicyInvalid;
- crd.py: the CRD generated from the models (the API server's copy of their caps).

A plugin's own args are checked by its ``Args`` model with framework/validation.py's wording.
"""

from .check import Validated, validate  # noqa: F401
from .errors import PolicyInvalid  # noqa: F401
from .models import SchedulingPolicy, SchedulingPolicySpec  # noqa: F401
from .status import Condition, PolicyPluginStatus, SchedulingPolicyStatus  # noqa: F401
