"""`policy-scheduler tune` on the live cluster (no --snapshot: the cluster is read as simulate reads
it) and its progress bar on a terminal."""

from __future__ import annotations

import json

from policy_scheduler import cli
from policy_scheduler.commands import whatif as cmd
from policy_scheduler.whatif.snapshot import from_dict
from support.whatif import policy, snapshot_doc, stream


def pods_file(tmp_path, n=40):
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": stream(n)}))
    return str(path)


def live(monkeypatch, doc):
    """The live cluster as `_live_snapshot` would read it; what it was asked with."""
    asked = []

    def take(a, who):
        asked.append((who, a.kubeconfig, a.context, a.scheduler_name, a.default_policy))
        return from_dict(doc)

    monkeypatch.setattr(cmd, "_live_snapshot", take)
    return asked


def test_without_a_snapshot_tune_reads_the_live_cluster(tmp_path, monkeypatch, capsys):
    doc = snapshot_doc(12)
    doc["policies"] = [policy()]  # the cluster's policy, named by --policy
    asked = live(monkeypatch, doc)
    args = ["tune", "--policy", "pack", "--pods", pods_file(tmp_path), "--max-replays", "6", "--kubeconfig", "kc",
            "--context", "ctx", "--scheduler-name", "mine"]
    assert cli.main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert asked == [("tune", "kc", "ctx", "mine", "default")]
    assert out["source"] == "the live cluster" and out["snapshot"] is None and out["policy"] == "pack"
    assert 1 <= out["replays"] <= 6
    assert cli.main(args) == 0
    assert capsys.readouterr().out.startswith("tuning pack on 40 pods, 12 nodes:")


def test_a_cluster_that_cannot_be_read_is_status_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cmd, "_live_snapshot", lambda a, who: None)  # it printed why
    assert cli.main(["tune", "--policy", "pack", "--pods", pods_file(tmp_path)]) == 1


def test_a_snapshot_is_still_read_from_its_file(tmp_path, monkeypatch, capsys):
    asked = live(monkeypatch, snapshot_doc(12))
    (tmp_path / "snap.json").write_text(json.dumps(snapshot_doc(12)))
    (tmp_path / "policy.json").write_text(json.dumps(policy()))
    assert cli.main(["tune", "--policy", str(tmp_path / "policy.json"), "--snapshot", str(tmp_path / "snap.json"),
                     "--pods", pods_file(tmp_path), "--max-replays", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert asked == [] and out["source"] == out["snapshot"] == str(tmp_path / "snap.json")


class Bar:
    made: list["Bar"] = []

    def __init__(self, **kw):
        self.kw, self.n, self.closed = kw, 0, False
        self.total = kw["total"]
        Bar.made.append(self)

    def update(self, k=1):
        self.n += k

    def refresh(self):
        pass

    def close(self):
        self.closed = True


def test_a_terminal_shows_a_progress_bar_of_the_replays(tmp_path, monkeypatch, capsys):
    import tqdm

    Bar.made = []
    monkeypatch.setattr(tqdm, "tqdm", Bar)
    monkeypatch.setattr(cmd.sys.stderr, "isatty", lambda: True)
    (tmp_path / "snap.json").write_text(json.dumps(snapshot_doc(12)))
    (tmp_path / "policy.json").write_text(json.dumps(policy()))
    args = ["tune", "--policy", str(tmp_path / "policy.json"), "--snapshot", str(tmp_path / "snap.json"),
            "--pods", pods_file(tmp_path), "--max-replays", "8"]
    assert cli.main([*args, "--holdout", "0.5"]) == 0
    text = capsys.readouterr().out
    bar, = Bar.made
    replays = int(text.split("\n\n")[-1].split()[0])  # "N replays of 8 in ..."
    assert bar.kw["unit"] == "replay" and bar.kw["delay"] == 2.0 and bar.kw["leave"] is False
    assert bar.closed and bar.n == replays + 2 == bar.total  # the search's, then the held-out check's two
    assert cli.main([*args, "--json"]) == 0  # JSON: no bar (as simulate --json)
    assert len(Bar.made) == 1
    monkeypatch.setattr(cmd.sys.stderr, "isatty", lambda: False)
    assert cli.main(args) == 0  # not a terminal: no bar
    assert len(Bar.made) == 1
