"""serve.py, the operator's composition root: what it makes of `run`'s flags."""

from policy_scheduler.cli import build_parser
from policy_scheduler.serve import election_config


def test_the_lease_is_named_after_the_scheduler_unless_the_flags_name_it():
    a = build_parser().parse_args(["run", "--scheduler-name", "mine", "--leader-elect-lease-duration", "20s"])
    cfg = election_config(a)
    assert (cfg.name, cfg.namespace, cfg.lease_duration) == ("mine", "kube-system", 20.0)
    assert cfg.check() == []
    a = build_parser().parse_args(["run", "--leader-elect-resource-name", "lease", "--leader-elect-renew-deadline",
                                   "30s"])
    cfg = election_config(a)
    assert cfg.name == "lease" and cfg.check()  # a renew deadline longer than the lease: refused
