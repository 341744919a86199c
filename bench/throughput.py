#!/usr/bin/env python3
"""Scheduling throughput and latency on the real local control plane, like for like: four
schedulers, one after the other, each on a fresh control plane:

  policy-scheduler                the ``default`` policy
  kube-scheduler                  v1.37.1, its full default profile
  kube-scheduler (same plugins)   v1.37.1 with a profile of exactly the ``default`` policy's
                                  plugins, weights and args, read from policies/default.yaml
                                  (every other default plugin disabled; DynamicResources is in it
                                  when the policy has it; GangScheduling only with the gang gates)
  bare binder (ceiling)           binds pods round-robin with no decision and posts their
                                  Scheduled event: the most this API server allows here

and, on request, variants of policy-scheduler whose ``default`` policy carries one more field
(same plugins, same workload, interleaved with the others under --repeat):

  --tuning       policy-scheduler, tuning on        spec.tuning (Recommend, every 3 s over the
                                                    last 500 pods): the tuner's cost
  --shadow       policy-scheduler (shadow)          spec.rollout, strategy Shadow, with a candidate
                                                    of the same plugins and args and other weights
                                                    (NodeResourcesFit 5, PodTopologySpread 1,
                                                    InterPodAffinity 1): for every pod the candidate
                                                    decides too, from the stable cycle's scores
                                                    (the shared way), and never binds
  --shadow-full  policy-scheduler (shadow full)     the same with a candidate whose NodeResourcesFit
                                                    scores MostAllocated (an arg, weights as they
                                                    are): a full cycle of the candidate per pod

Workloads, shaped like upstream's scheduler_perf (its node-default and pod-default templates:
nodes of 4 cpu / 32Gi / 110 pods, pods requesting and limited to 100m / 500Mi; nodes spread
over 3 zones):

  SchedulingBasic     plain pods with requests                        default 1000 nodes x 5000 pods
  NodeAffinity        pods require zone In [zone-0, zone-1]            default 1000 nodes x 5000 pods
  TopologySpreading   zone spread, maxSkew 1, DoNotSchedule            default 1000 nodes x 5000 pods
  PodAntiAffinity     required hostname anti-affinity within an app    default  500 nodes x 1000 pods
                      (apps of nodes/2 pods: at most one per node)

the rest of upstream's ``performance`` catalogue (its templates; sizes scaled like the above; no
latency phase, as upstream measures throughput only; WORKLOAD_NOTES says what differs):

  PreferredTopology-  pod-with-preferred-topology-spreading: color=blue, default 1000 nodes x 2000 pods
    Spreading         zone spread maxSkew 5, ScheduleAnyway; 1 pod-default pod per node bound up front
  PreferredPod-       pod-with-preferred-pod-affinity: color=red,     default 1000 nodes x 2000 pods
    Affinity          preferred (weight 1) hostname affinity to color=red; 1 pod of the same template
                      per node bound up front (upstream: in another namespace the term names; here one)
  PreferredPod-       the same with color=yellow and preferred         default 1000 nodes x 2000 pods
    AntiAffinity      hostname anti-affinity
  Unschedulable       pod-default pods, while a pod that fits nowhere  default 1000 nodes x 5000 pods
                      (bench-high, priority 10, 9 cpu on nodes of 4) is created every 200 ms (upstream's
                      churn op, mode create) from the scheduler's start to the last measured pod
  SchedulingWith-     pod-default pods, while every second a node for  default 1000 nodes x 5000 pods
    MixedChurn        0 pods, such an unschedulable pod and a Service are created, and the next second
                      deleted (churn op, mode recreate, number 1), over the same span
  SchedulingGated-    upstream's SchedulingWhileGated without its      default    1 node  x 5000 pods
    Pods              deleted pods: one node for 90000 pods, 10000 (quick 1000) pods gated for good
                      (test.k8s.io/hold) created first, light pods (no requests) measured
  ExtendedResource    SchedulingWithExtendedResource: node i has       default 1000 nodes x 1000 pods
                      foo.com/bar-i: 1 and pod i requests it, nothing else: one node fits each pod
  SchedulingDaemonset a DaemonSet's pods: pod i pinned to node i by  default 15000 nodes x 15000 pods
                      required node affinity matchFields metadata.name In [node-i] (the DaemonSet
                      controller's pin), no requests (upstream pins its 30000 pods to one node)

The churn runs for every scheduler alike; the bare binder leaves pods that fit nowhere or are
gated alone (a decision it gets for free). Both schedulers run every workload with the same
plugins: the ``default`` policy's (it has NodeAffinity, PodTopologySpread, InterPodAffinity and
NodeResourcesFit, which the catalogue needs; SchedulingGates is implicit in ours and explicit in
the kube-same profile).

the rest of this benchmark's own workloads:
  PreemptionBasic     scheduler_perf's PreemptionBasic: every node     default  500 nodes x  500 pods
                      already holds 4 low-priority pods of 900m (created bound, not measured); the
                      measured pods (priority 10, 3 cpu) each preempt 3 of them; no latency phase
  GangScheduling      Kubernetes' own PodGroups (scheduling.k8s.io,   default  500 nodes x 1000 pods
                      minCount 50, pods' spec.schedulingGroup): 20 groups of 50 pods, all or
                      nothing; the control plane and kube-scheduler run with the GenericWorkload
                      and TopologyAwareWorkloadScheduling gates; also reported: when the last
                      group was whole (its last member scheduled); no latency phase
  GangPreemption      GangScheduling's PodGroups on full nodes: every default  500 nodes x  500 pods
                      node already holds 4 pods of 900m of PriorityClass bench-low (value 10,
                      created bound, not measured); the measured pods (3 cpu, one per node) are
                      in groups of 10 (minCount 10) of PriorityClass bench-gang-high (value
                      1000, on the PodGroup and on its members alike, as upstream requires): each
                      group preempts 3 victims on each of 10 nodes to fit; no latency phase
  SchedulingBasic5k   SchedulingBasic at upstream's headline size     default 5000 nodes x 10000 pods
  Scale               5,000 nodes holding 50,000 pods created bound   default 5000 nodes x  1000 pods
                      up front (10 per node, in every scheduler's cache), then SchedulingBasic
                      pods: peak RSS and decision time at that size; no latency phase
  DRA                 scheduler_perf's SchedulingWithResourceClaim-   default  500 nodes x 2500 pods
                      Template burst (bench/dra_workload.py): nodes scheduler-perf-dra-<i> with
                      a pool each (--dra-devices devices, 10) of partitionable devices: a slice of
                      devices and one of their shared counters; DeviceClass test-class,
                      pods with one claim from the ResourceClaimTemplate test-claim-template;
                      half the devices go to pods scheduled first (not measured, --dra-init), the
                      other half to the measured pods (--pods); kube-controller-manager's
                      resourceclaim controller runs for every scheduler alike; measured as below

For the gang workloads, per scheduler: when the last group was whole, and the group latency: for
each group, from when it could first be tried (its last member created, or the scheduler started
if later: here every pod exists before the start, so it is from the start) to when it was whole
(its last member bound with its Scheduled event), averaged over the groups; also the same from the
first pod scheduled (start-up left out). Ratios policy-scheduler / kube-scheduler (same plugins)
of both (below 1: ours was quicker). And the group attempt latency as both schedulers measure it:
the mean of scheduler_podgroup_scheduling_attempt_duration_seconds (kube-scheduler 1.37's
pod-group scheduling attempt: from the group's pop to its placement assumed and its members
handed to binding, every result) over the throughput phase, with
scheduler_podgroup_scheduling_algorithm_duration_seconds beside it.

Without --workload the first four run (with --quick, SchedulingBasic only); --workload takes
names, repeated or comma-separated (``--workload SchedulingBasic,Unschedulable``), or ``all``:
every workload, in the order listed in WORKLOADS (SchedulingBasic first, the largest last but
DRA). A workload that fails is reported as failed in the JSON (``workloads.<name>.error``) and
the others still run; the run's ``ok`` is then false and it exits 1. Every run gets a
fresh control plane (etcd + kube-apiserver in its own state dir under .local/bench-<time>/),
plain Node objects (no kwok, so nothing else loads the API server; --kwok adds it), and:

1. Throughput. All measured pods are created first, while no scheduler runs, then the scheduler
   process starts (upstream's scheduler_perf also measures pods created up front). The benchmark
   watches pods and events (LIST+WATCH). A pod counts as scheduled once it is bound (its
   spec.nodeName seen) and its Scheduled event exists; pods/s is the rate between the 10% and
   the 90% pod scheduled, which skips the start-up (process start, cache sync) and the tail.
   Also reported: the start-up (process start to the first pod scheduled), the time to the last
   Scheduled event, the scheduler's CPU per pod in the window and over the whole run (its start
   to the last pod), the API server's and etcd's CPU seconds over the whole run, the requests
   the API server served per pod (apiserver_request_total), the cores the rest of the machine
   used in the window (anything else running makes every figure noisier: compare runs made on
   a quiet machine, or use --repeat), and the decision time per attempt both schedulers export
   (scheduler_framework_extension_point_duration_seconds, PreFilter to Score).
2. Latency, twice. With the scheduler running, more pods (other apps of the same shape) are
   created at a steady open-loop rate, and the latency of each is the time from its creation to
   its being scheduled, as the benchmark's watches see them. First at --latency-load (0.25) x
   this scheduler's own measured pods/s (the same load for each), then at --latency-rate (100
   pods/s) for every scheduler alike. A phase whose achieved rate falls below 90% of the offered
   one is marked saturated.

The DRA workload is measured otherwise, as upstream's scheduler_perf: with the scheduler running
and the first --dra-init pods scheduled (at least one: the start-up is not measured), the
measured pods are posted (--create-concurrency in flight) and pods/s is their count over the time
from the first create to the last bound, the claims' creation by the controller included (the
pods wait in PreEnqueue until their claim exists). Also reported: the same to the last Scheduled
event and between the 10% and the 90% pod, the time to post them all and to the last claim
named in a pod's status (the controller), creation-to-claim and claim-to-bound times, and the
controller's CPU. The checks add: no device allocated twice (every claim's
status.allocation.devices.results), every bound pod's claim controlled by it, allocated once (one
device, of the slice of the pod's node, a node selector naming it) and reserved for it alone.
After the checks the pods and their claims are deleted and the run waits until no claim is left
(every one deallocated by the controller, its finalizer then removed): cleanup s. The bare binder
allocates too (a free device round-robin over the nodes, the claim's finalizer and then its
status written as kube-scheduler's PreBind does, then the binding and the event). When the
``default`` policy has no DynamicResources, policy-scheduler and kube-scheduler (same plugins)
cannot allocate and are left out of this workload (said in the report).

Peak RSS is the scheduler process's VmHWM at the end of the run. Client limits are the same for
all: --qps / --burst (kube-scheduler's clientConnection, policy-scheduler's --qps/--burst, the
binder's client); policy-scheduler and the binder bind with --bind-concurrency requests in
flight.

Checks (any failure ends the benchmark with an error and ``"ok": false``): every created pod
ends bound; no pod's node ever changes (the API forbids rebinding); for the schedulers no node
holds more than its allocatable cpu, memory and pods, and the workload's constraint holds (zone
affinity, skew <= 1 per app, at most one pod of an app per node, each DaemonSet pod on its own
node, no node's extended resource overcommitted; pods bound only to the workload's nodes); pods
that fit nowhere or are gated stay unbound (gated ones keep their gate); no pod has more than one
Scheduled event. Also reported: Scheduled events and 'scheduled' attempts from each scheduler's
own metrics (each should equal the pods), binding conflicts (409), and warnings or errors in
the scheduler's log (logs are kept in the run directory). For a shadow variant, after the
latency phases and before the scheduler stops, the policy's status.rollout is read from the API
server (polled until ``shadow.compared`` reaches the expected count or stops moving for 6 s: the
operator writes the status every 2 s): its phase must be Shadowing and ``compared`` must equal
the pods it scheduled (throughput and latency phases) plus the failed attempts its metrics
count; ``changed`` and the plugins that moved the changed decisions are reported.

    .venv/bin/python bench/throughput.py [--quick] [--workload NAME[,NAME...] ... | --workload all]
        [--nodes N] [--pods M] [--schedulers policy-scheduler kube-scheduler kube-same kube-minimal ceiling]
        [--qps 5000] [--burst 10000] [--bind-concurrency 64] [--latency-pods L]
        [--latency-load F] [--latency-rate R] [--repeat N] [--kwok] [--tuning] [--shadow]
        [--shadow-full] [--operator-arg=--flag=value] [--dra-devices 10] [--dra-init N]

--quick runs SchedulingBasic at 200 nodes x 2000 pods with 300 latency pods (other workloads:
PodAntiAffinity 100 x 500, GangScheduling 100 x 500, PreemptionBasic 100 x 100, GangPreemption
100 x 100 (10 groups of 10),
SchedulingBasic5k 1000 x 2000, Scale 1000 nodes with 2,000 bound pods, DRA 100 nodes with
500 + 500 pods, the Preferred* three 200 x 500 with 200 bound, Unschedulable and
SchedulingWithMixedChurn 200 x 2000, SchedulingGatedPods 1 x 2000 with 1000 gated, ExtendedResource
500 x 500, SchedulingDaemonset 2000 x 2000): under two minutes each.
--repeat N runs every scheduler N times, interleaved, and reports the run with the median
pods/s. Tables go to stdout, progress to stderr; the last line of stdout is one JSON object with
every figure and the ratios of pods/s (``ratios.ours_vs_kube``: policy-scheduler / kube-scheduler
with the same plugins; ``ours_vs_kube_full``: against its default profile; ``ours_vs_ceiling``;
``ours_vs_kube_minimal`` (and ``_avg``, and ``ceiling_vs_kube_minimal``): against kube-minimal,
kube-scheduler with only PrioritySort and DefaultBinder, the API server's ceiling through client-go;
``tuning_vs_ours``, ``shadow_vs_ours``, ``shadow_full_vs_ours``: a variant / plain policy-scheduler,
and ``shadow_cpu_per_pod_vs_ours``, ``shadow_full_cpu_per_pod_vs_ours``: the same for its CPU per
pod in the window), also saved as result.json in the run directory next to each run's logs (written
after every workload, with the run's start and end time, commit, cores and load averages);
``bench/table.py <result.json>`` prints one markdown table of every workload from it. With
--shadow the report prints ``shadow cost: ours(shadow) pods/s / ours pods/s = X (-Y%)`` and the
shadow's tally; --tuning, --shadow and --shadow-full add to --schedulers (e.g. ``--schedulers
policy-scheduler --shadow`` runs the plain one and the shadow one).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import datetime
import json
import logging
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import aiohttp
import yaml

from policy_scheduler.policy.models import SchedulingPolicySpec
from policy_scheduler.cluster.informer import Informer
from policy_scheduler.cluster.credentials import load_credentials
from policy_scheduler.cluster.kubeclient import ApiError, KubeClient
from policy_scheduler.framework.cycle.shadow import shares_filters
from policy_scheduler.framework.model.quantity import to_int

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "bench"))
import dra_workload as dra  # noqa: E402
import localcluster  # noqa: E402

OURS, KUBE, KUBE_SAME, CEILING = "policy-scheduler", "kube-scheduler", "kube-same", "ceiling"
# kube-scheduler with a minimal profile (PrioritySort, DefaultBinder, nothing else): the API
# server's ceiling through client-go, beside the bare binder's through our own Python client
KUBE_MIN = "kube-minimal"
KUBES = (KUBE, KUBE_SAME, KUBE_MIN)
# workloads kube-minimal sits out, and why (recorded in the result's "skipped")
MINIMAL_LEFT_OUT = {
    "SchedulingBasic5k": "at 5,000 nodes the minimal profile's bindings outrun the API server: on 29 Nov "
                         "a few timed out after the server had bound them, kube-scheduler retried each "
                         "into a 409 for good and never posted their Scheduled events, so its run never ends"}
OURS_TUNING = "policy-scheduler-tuning"  # --tuning: the default policy with spec.tuning on (Recommend)
OURS_SHADOW = "policy-scheduler-shadow"  # --shadow: the default policy with a Shadow rollout (other weights)
OURS_SHADOW_FULL = "policy-scheduler-shadow-full"  # --shadow-full: a Shadow rollout whose candidate changes an arg
OURS_NO_HINTS = "policy-scheduler-no-suggestions"  # --no-suggestions: run --suggestions=off (what the searches cost)
SHADOWS = (OURS_SHADOW, OURS_SHADOW_FULL)
OURS_ALL = (OURS, OURS_TUNING, *SHADOWS, OURS_NO_HINTS)  # every policy-scheduler process
OPTIONAL = {OURS_TUNING: "tuning", OURS_SHADOW: "shadow", OURS_SHADOW_FULL: "shadow_full",
            OURS_NO_HINTS: "no_suggestions"}  # added by their option
SCHEDULERS = (OURS, OURS_NO_HINTS, OURS_TUNING, OURS_SHADOW, OURS_SHADOW_FULL, KUBE, KUBE_SAME, KUBE_MIN,
              CEILING)  # run order
SCHEDULER_NAME = {**{o: "policy-scheduler" for o in OURS_ALL}, KUBE: "default-scheduler",
                  KUBE_SAME: "default-scheduler", KUBE_MIN: "default-scheduler", CEILING: "bench-binder"}
LABEL = {OURS: "policy-scheduler", OURS_TUNING: "policy-scheduler, tuning on", OURS_SHADOW: "policy-scheduler (shadow)",
         OURS_SHADOW_FULL: "policy-scheduler (shadow full)", OURS_NO_HINTS: "policy-scheduler, suggestions off",
         KUBE: "kube-scheduler",
         KUBE_SAME: "kube-scheduler (same plugins)", KUBE_MIN: "kube-scheduler (minimal, ceiling)",
         CEILING: "bare binder (ceiling)"}
# what --tuning adds to the default policy: the tuner evaluates every 3 s over the last 500 pods,
# in Recommend mode, so that the weights stay as they are and any change in pods/s is its cost
TUNING = {"mode": "Recommend", "interval": "3s", "window": {"pods": 500},
          "objective": {"imbalance": 10, "nodesUsed": 1},
          "bounds": {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10],
                     "NodeResourcesBalancedAllocation": [1, 10]}}
# what --shadow adds to the default policy: spec.rollout, strategy Shadow, whose candidate is the
# same plugin list with the same args and other Score weights (more on NodeResourcesFit, less on
# PodTopologySpread and InterPodAffinity): the shadow takes the shared way, the stable cycle's
# scores under the candidate's weights. --shadow-full: the candidate's NodeResourcesFit scores
# MostAllocated instead (an arg, weights unchanged): the candidate runs a cycle of its own per pod
SHADOW_WEIGHTS = {"NodeResourcesFit": 5, "PodTopologySpread": 1, "InterPodAffinity": 1}
SHADOW_FULL_STRATEGY = "MostAllocated"
NAMESPACE = "bench"
ZONE, HOSTNAME = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
NODE_CPU, NODE_MEM, NODE_PODS = "4", "32Gi", "110"  # scheduler_perf's node-default.yaml
POD_CPU, POD_MEM = "100m", "500Mi"  # scheduler_perf's pod-default.yaml
TICK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


def progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ workloads
@dataclass(frozen=True)
class Workload:
    name: str
    nodes: int
    pods: int
    quick_nodes: int
    quick_pods: int
    zones: int = 3
    init_per_node: int = 0  # pods created bound on every node before the run (not measured)
    group_size: int = 0  # pods per native PodGroup (minCount), consecutive pods by index (gangs)
    preempts: bool = False  # the init pods are low-priority victims, the measured pods preempt them
    quick_init_per_node: int | None = None  # init pods per node with --quick (default: init_per_node)
    dra: bool = False  # pods with a claim from a template, nodes with a ResourceSlice (bench/dra_workload.py)
    # during the measured window, for every scheduler alike (upstream's churn op): "create", one
    # unschedulable pod every 200 ms (Unschedulable); "recreate", every second a node that holds no
    # pod, an unschedulable pod and a Service created, the next second deleted (SchedulingWithMixedChurn)
    churn: str = ""
    gated: int = 0  # pods whose scheduling gate stays, created before the scheduler starts (not measured)
    quick_gated: int = 0
    node_pods: str = NODE_PODS  # pods per node (scheduler_perf's node-with-name.yaml: 90000)
    latency: bool = True  # the latency phases (none for the catalogue's workloads: as upstream, throughput only)

    @property
    def gangs(self) -> bool:
        return self.group_size > 0

    def group(self, phase: str, i: int) -> str:
        return f"{phase}-gang-{i // self.group_size:03d}"

    @property
    def high_priority(self) -> str:
        """PriorityClass of the measured pods that preempt (and of their PodGroups)."""
        return GANG_HIGH_PRIORITY if self.gangs else HIGH_PRIORITY

    def pod_groups(self, phase: str, pods: int) -> list[dict]:
        """Kubernetes' own PodGroups (scheduling.k8s.io), all-or-nothing: minCount = group_size;
        with preemption the group's priorityClassName is its members' (upstream validates that a
        member's priority equals its group's)."""
        spec = {"priorityClassName": self.high_priority} if self.preempts else {}
        return [{"apiVersion": f"scheduling.k8s.io/{localcluster.GANG_API_VERSION}", "kind": "PodGroup",
                 "metadata": {"name": self.group(phase, i), "namespace": NAMESPACE},
                 "spec": {"schedulingPolicy": {"gang": {"minCount": min(self.group_size, pods - i)}}, **spec}}
                for i in range(0, pods, self.group_size)]

    def init_pods(self, nodes: int, per_node: int) -> list[dict]:
        """Pods bound up front: for preemption scheduler_perf's pod-low-priority.yaml (900m /
        500Mi, grace period 0; with gangs of PriorityClass bench-low), else its pod-default.yaml
        (100m / 500Mi)."""
        if self.name in INIT_LIKE_MEASURED:  # upstream's init pods are the measured template (sched-0)
            bound = []
            for i in range(nodes):
                for j in range(per_node):
                    body = self.pod("i", i * per_node + j, "", nodes)
                    del body["spec"]["schedulerName"]  # bound already: whoever scheduled it
                    body["metadata"]["name"] = f"low-{i:05d}-{j}"
                    body["spec"]["nodeName"] = f"node-{i:05d}"
                    bound.append(body)
            return bound
        cpu = "900m" if self.preempts else POD_CPU
        low = {"priorityClassName": LOW_PRIORITY} if self.preempts and self.gangs else {}
        return [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"low-{i:05d}-{j}", "namespace": NAMESPACE, "labels": {"app": "low"}},
                 "spec": {"nodeName": f"node-{i:05d}", "terminationGracePeriodSeconds": 0, **low,
                          "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                          "ports": [{"containerPort": 80}],
                                          "resources": {"requests": {"cpu": cpu, "memory": POD_MEM},
                                                        "limits": {"cpu": cpu, "memory": POD_MEM}}}]}}
                for i in range(nodes) for j in range(per_node)]

    def node(self, i: int, kwok: bool) -> dict:
        name = f"node-{i:05d}"
        alloc = {"cpu": NODE_CPU, "memory": NODE_MEM, "pods": self.node_pods}
        if self.name == "ExtendedResource":  # misc/templates/node-with-extended-resource.yaml
            alloc[extended_resource(i)] = "1"
        status: dict[str, Any] = {"capacity": alloc, "allocatable": alloc}
        if not kwok:  # kwok's node-initialize stage fills in the conditions of the nodes it manages
            status["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                     "message": "plain Node object"}]
        if self.dra:
            return dra.node(i, self.zones, NODE_CPU, NODE_MEM, NODE_PODS, HOSTNAME, ZONE,
                            {localcluster.KWOK_NODE_ANNOTATION: "fake"} if kwok else {}, status.get("conditions"))
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {HOSTNAME: name, ZONE: f"zone-{i % self.zones}"},
                             "annotations": {localcluster.KWOK_NODE_ANNOTATION: "fake"} if kwok else {}},
                "status": status}

    def app(self, phase: str, i: int, nodes: int) -> str:
        if self.name == "PodAntiAffinity":
            return f"{phase}-anti-{i // max(1, nodes // 2)}"
        return f"{phase}-app"

    def pod(self, phase: str, i: int, scheduler_name: str, nodes: int) -> dict:
        app = self.app(phase, i, nodes)
        if self.dra:
            return dra.pod(f"{phase}-{i:06d}", NAMESPACE, scheduler_name, POD_CPU, POD_MEM, app)
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 80}],
                            "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEM},
                                          "limits": {"cpu": POD_CPU, "memory": POD_MEM}}}],
        }
        labels = {"app": app}
        if self.name in ("SchedulingGatedPods", "SchedulingDaemonset", "ExtendedResource"):
            # light-pod.yaml / daemonset-pod.yaml / pod-with-extended-resource.yaml: no cpu, memory, port
            spec["containers"] = [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
            if self.name == "SchedulingGatedPods":
                spec["terminationGracePeriodSeconds"] = 0
        if self.name == "ExtendedResource":  # pod i asks for node i's own resource: it fits that node alone
            one = {extended_resource(i % nodes): "1"}
            spec["containers"][0]["resources"] = {"requests": one, "limits": dict(one)}
        elif self.name == "SchedulingDaemonset":  # the DaemonSet controller's pin: matchFields metadata.name
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [f"node-{i % nodes:05d}"]}]}]}}}
        elif self.name == "PreferredTopologySpreading":  # pod-with-preferred-topology-spreading.yaml
            labels["color"] = "blue"
            spec["topologySpreadConstraints"] = [{"maxSkew": 5, "topologyKey": ZONE,
                                                  "whenUnsatisfiable": "ScheduleAnyway",
                                                  "labelSelector": {"matchLabels": {"color": "blue"}}}]
        elif self.name in ("PreferredPodAffinity", "PreferredPodAntiAffinity"):  # pod-with-preferred-pod-*.yaml
            color = "red" if self.name == "PreferredPodAffinity" else "yellow"
            kind = "podAffinity" if self.name == "PreferredPodAffinity" else "podAntiAffinity"
            labels["color"] = color
            spec["affinity"] = {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"color": color}},
                                                  "topologyKey": HOSTNAME}}]}}
        if self.preempts:  # scheduler_perf's pod-high-priority.yaml: priority 10, 3 cpu
            spec["priorityClassName"] = self.high_priority
            for k in ("requests", "limits"):
                spec["containers"][0]["resources"][k]["cpu"] = "3000m"
        if self.gangs:
            spec["schedulingGroup"] = {"podGroupName": self.group(phase, i)}
        if self.name == "NodeAffinity":
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": ZONE, "operator": "In", "values": self.affinity_zones()}]}]}}}
        elif self.name == "TopologySpreading":
            spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE,
                                                  "whenUnsatisfiable": "DoNotSchedule",
                                                  "labelSelector": {"matchLabels": {"app": app}}}]
        elif self.name == "PodAntiAffinity":
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME}]}}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{phase}-{i:06d}", "namespace": NAMESPACE, "labels": labels},
                "spec": spec}

    def unplaceable_pod(self, i: int, scheduler_name: str) -> dict:
        """--unplaceable: a pod asking for more cpu than any node has (1000 cores), so it stays
        pending; the scheduler tries it, reports it, and (policy-scheduler) searches what would
        place it. Lowest priority, as the measured pods'."""
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"x-{i:06d}", "namespace": NAMESPACE,
                             "labels": {"app": "unplaceable", ROLE: UNSCHEDULABLE}},
                "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                         "resources": {"requests": {"cpu": "1000", "memory": POD_MEM}}}]}}

    def gated_pod(self, i: int, scheduler_name: str) -> dict:
        """scheduler_perf's gated-pod.yaml: a gate nobody lifts, no requests."""
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"g-{i:06d}", "namespace": NAMESPACE, "labels": {"app": "gated", ROLE: GATED}},
                "spec": {"schedulerName": scheduler_name, "schedulingGates": [{"name": "test.k8s.io/hold"}],
                         "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}

    def churn_objects(self, k: int, scheduler_name: str) -> list[tuple[str, dict]]:
        """What one churn tick creates (API path, body): for "create" scheduler_perf's
        pod-high-priority-large-cpu.yaml (priority 10, 9 cpu: fits no node of 4, and preempting
        cannot make room); for "recreate" also templates/churn/node-default.yaml (a node for 0
        pods) and churn/service-default.yaml."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"u-{k:06d}", "namespace": NAMESPACE,
                            "labels": {"app": "unschedulable", ROLE: UNSCHEDULABLE}},
               "spec": {"schedulerName": scheduler_name, "priorityClassName": HIGH_PRIORITY,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                        "ports": [{"containerPort": 80}],
                                        "resources": {"requests": {"cpu": "9", "memory": POD_MEM}}}]}}
        out = [(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)]
        if self.churn == "recreate":
            zero = {"pods": "0"}
            out.insert(0, ("/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": f"churn-node-{k:06d}"},
                "status": {"capacity": zero, "allocatable": zero,
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}))
            out.append((f"/api/v1/namespaces/{NAMESPACE}/services", {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": f"churn-svc-{k:06d}", "namespace": NAMESPACE},
                "spec": {"selector": {"app": "foo"},
                         "ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}]}}))
        return out

    def affinity_zones(self) -> list[str]:
        return [f"zone-{z}" for z in range(max(1, self.zones - 1))]

    def violations(self, pods: list[dict], nodes: dict[str, dict]) -> list[str]:
        """Capacity on every node, and the workload's own constraint."""
        out: list[str] = []
        used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        other: dict[str, Counter] = defaultdict(Counter)  # extended resources requested per node
        for p in pods:
            node = p["spec"].get("nodeName")
            if not node:
                continue
            if p["metadata"].get("deletionTimestamp"):
                continue  # a preemption victim on its way out
            if node not in nodes:
                out.append(f"pod {p['metadata']['name']} on {node}, not one of the workload's nodes")
                continue
            req = (p["spec"]["containers"][0].get("resources") or {}).get("requests") or {}
            u = used[node]
            u[0] += to_int(req.get("cpu", "0"), milli=True)
            u[1] += to_int(req.get("memory", "0"))
            u[2] += 1
            other[node].update({k: to_int(v) for k, v in req.items() if k not in ("cpu", "memory")})
        for node, (cpu, mem, count) in used.items():
            alloc = nodes[node]["status"]["allocatable"]
            cap = (to_int(alloc["cpu"], milli=True), to_int(alloc["memory"]), to_int(alloc["pods"]))
            if cpu > cap[0] or mem > cap[1] or count > cap[2]:
                out.append(f"node {node} over allocatable: {cpu}m cpu, {mem} memory, {count} pods > {cap}")
            out += [f"node {node} over allocatable: {v} {k} > {alloc.get(k, 0)}" for k, v in other[node].items()
                    if v > to_int(alloc.get(k, "0"))]
        zone = {n: b["metadata"]["labels"][ZONE] for n, b in nodes.items()}
        by_app: dict[str, list[str]] = defaultdict(list)
        for p in pods:
            if p["spec"].get("nodeName"):
                by_app[p["metadata"]["labels"]["app"]].append(p["spec"]["nodeName"])
        if self.name == "NodeAffinity":
            allowed = set(self.affinity_zones())
            out += [f"pod {p['metadata']['name']} on {p['spec']['nodeName']} in {zone[p['spec']['nodeName']]}, "
                    f"outside its required zones" for p in pods
                    if p["spec"].get("nodeName") and zone[p["spec"]["nodeName"]] not in allowed]
        elif self.name == "TopologySpreading":
            for app, placed in by_app.items():
                counts = Counter(zone[n] for n in placed)
                per_zone = [counts.get(f"zone-{z}", 0) for z in range(self.zones)]
                if max(per_zone) - min(per_zone) > 1:
                    out.append(f"app {app}: zone skew {max(per_zone) - min(per_zone)} > 1 ({per_zone})")
        elif self.name == "PodAntiAffinity":
            for app, placed in by_app.items():
                out += [f"app {app}: {c} pods on node {n}" for n, c in Counter(placed).items() if c > 1]
        elif self.name == "SchedulingDaemonset":  # on the one node its affinity names
            for p in pods:
                node, term = p["spec"].get("nodeName"), (p["spec"].get("affinity") or {}).get("nodeAffinity")
                if node and term:
                    want = term["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
                        "matchFields"][0]["values"][0]
                    if node != want:
                        out.append(f"pod {p['metadata']['name']} on {node}, pinned to {want}")
        return out


WORKLOADS = {w.name: w for w in (
    Workload("SchedulingBasic", 1000, 5000, 200, 2000),
    Workload("NodeAffinity", 1000, 5000, 200, 2000),
    Workload("TopologySpreading", 1000, 5000, 200, 2000),
    Workload("PodAntiAffinity", 500, 1000, 100, 500),
    # the catalogue's other `performance` workloads (upstream's templates; sizes scaled like the above)
    # preferred constraints over 1 bound pod per node (upstream: initPods = initNodes, placed first)
    Workload("PreferredTopologySpreading", 1000, 2000, 200, 500, init_per_node=1, latency=False),
    Workload("PreferredPodAffinity", 1000, 2000, 200, 500, init_per_node=1, latency=False),
    Workload("PreferredPodAntiAffinity", 1000, 2000, 200, 500, init_per_node=1, latency=False),
    Workload("Unschedulable", 1000, 5000, 200, 2000, churn="create", latency=False),
    Workload("SchedulingWithMixedChurn", 1000, 5000, 200, 2000, churn="recreate", latency=False),
    # upstream's SchedulingWhileGated: one node for 90000 pods, 10000 gated pods, light pods measured
    Workload("SchedulingGatedPods", 1, 5000, 1, 2000, gated=10000, quick_gated=1000, node_pods="90000",
             latency=False),
    Workload("ExtendedResource", 1000, 1000, 500, 500, latency=False),
    Workload("PreemptionBasic", 500, 500, 100, 100, init_per_node=4, preempts=True),
    Workload("GangScheduling", 500, 1000, 100, 500, group_size=50),
    # groups of 10 members of 3 cpu on nodes full of low-priority pods: every group preempts
    Workload("GangPreemption", 500, 500, 100, 100, init_per_node=4, preempts=True, group_size=10),
    Workload("SchedulingBasic5k", 5000, 10000, 1000, 2000),
    # the scale mode: 50,000 pods bound up front in the cache of every scheduler, then 1,000 more
    Workload("Scale", 5000, 1000, 1000, 500, init_per_node=10, quick_init_per_node=2),
    # a DaemonSet's pods: pod i pinned to node i by required node affinity on metadata.name
    Workload("SchedulingDaemonset", 15000, 15000, 2000, 2000, latency=False),
    # measured pods: by default half the devices (dra.sizes), the other half scheduled first
    Workload("DRA", 500, 2500, 100, 500, dra=True),
)}
MAIN_WORKLOADS = ("SchedulingBasic", "NodeAffinity", "TopologySpreading", "PodAntiAffinity")
# one line per workload, kept in the JSON result (bench/table.py prints them under the table); the
# catalogue's workloads say what upstream's scheduler_perf workload they port and what differs
WORKLOAD_NOTES = {
    "SchedulingBasic": "pod-default pods (100m / 500Mi) on node-default nodes",
    "NodeAffinity": "pods require zone In [zone-0, zone-1]",
    "TopologySpreading": "zone spread, maxSkew 1, DoNotSchedule, per app",
    "PodAntiAffinity": "required hostname anti-affinity within apps of nodes/2 pods",
    "PreferredTopologySpreading": "upstream's PreferredTopologySpreading: pods color=blue with a zone spread "
                                  "constraint maxSkew 5, ScheduleAnyway; 1 pod-default pod per node bound up front "
                                  "(upstream: initPods scheduled first)",
    "PreferredPodAffinity": "upstream's SchedulingPreferredPodAffinity: pods color=red preferring (weight 1) "
                            "hostname affinity to color=red; 1 pod of the same template per node bound up front; "
                            "one namespace (upstream: init pods in sched-0, measured in sched-1, the term naming both)",
    "PreferredPodAntiAffinity": "upstream's SchedulingPreferredPodAntiAffinity: as PreferredPodAffinity with "
                                "color=yellow and preferred hostname anti-affinity",
    "Unschedulable": "upstream's Unschedulable: pod-default pods measured while a pod that fits nowhere (priority "
                     "10, 9 cpu on nodes of 4: preemption cannot help) is created every 200 ms from the scheduler's "
                     "start to the last measured pod; no init pods (upstream: 100 at 5k nodes); the bare binder "
                     "skips those pods",
    "SchedulingWithMixedChurn": "upstream's SchedulingWithMixedChurn: pod-default pods measured while every "
                                "second a node for 0 pods, a pod that fits nowhere (priority 10, 9 cpu) and a "
                                "Service are created, the next second deleted (churn op, recreate, number 1), "
                                "from the scheduler's start to the last measured pod",
    "SchedulingGatedPods": "upstream's SchedulingWhileGated without its deleted pods: one node for 90000 pods, "
                           "gated pods (a gate nobody lifts) created first, light pods (no requests) measured",
    "ExtendedResource": "upstream's SchedulingWithExtendedResource: node i advertises foo.com/bar-i: 1, pod i "
                        "requests it (and nothing else): each pod fits one node (NodeResourcesFit); "
                        "DRAExtendedResource is GA (on) in 1.37, as upstream runs it; no DeviceClass maps the resource",
    "PreemptionBasic": "upstream's PreemptionBasic: 4 low-priority pods of 900m bound per node, measured pods "
                       "(priority 10, 3 cpu) each preempt 3",
    "GangScheduling": "native PodGroups of 50 (minCount 50), all or nothing",
    "GangPreemption": "PodGroups of 10 (priority 1000, 3 cpu) on nodes full of low-priority pods: every group preempts",
    "SchedulingBasic5k": "SchedulingBasic at upstream's 5000 nodes",
    "Scale": "10 pods per node bound up front (50,000 at 5000 nodes), then SchedulingBasic pods",
    "SchedulingDaemonset": "a DaemonSet's shape: pod i pinned to node i by required node affinity matchFields "
                           "metadata.name (the DaemonSet controller's pin), daemonset-pod (no requests); upstream's "
                           "SchedulingDaemonset pins all 30000 pods to one node of 15001",
    "DRA": "upstream's SchedulingWithResourceClaimTemplate: one device claim per pod, posted with the scheduler "
           "running; pods/s from the first create to the last bound; unlike upstream's, the devices are "
           "partitionable (each consumes its memory from a counter set per PCI root, published in a second "
           "slice of the node's pool; the counters hold every device)",
}
HIGH_PRIORITY = "bench-high"  # PriorityClass of PreemptionBasic's measured pods (value 10)
LOW_PRIORITY = "bench-low"  # GangPreemption's victims (value 10)
GANG_HIGH_PRIORITY = "bench-gang-high"  # GangPreemption's PodGroups and their members (value 1000)
PRIORITY_VALUES = {HIGH_PRIORITY: 10, LOW_PRIORITY: 10, GANG_HIGH_PRIORITY: 1000}
INIT_LIKE_MEASURED = ("PreferredPodAffinity", "PreferredPodAntiAffinity")
ROLE, GATED, UNSCHEDULABLE = "bench/role", "gated", "unschedulable"  # pods that must stay unbound
CHURN_INTERVAL = {"create": 0.2, "recreate": 1.0}  # seconds between churn ticks (upstream's intervalMilliseconds)


def extended_resource(i: int) -> str:
    """Node i's own extended resource (misc/templates/node-with-extended-resource.yaml)."""
    return f"foo.com/bar-{i}"


# ------------------------------------------------------------------------------------ processes
def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy (all processes), from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    """CPU seconds of some processes every ``interval``, to read any window afterwards."""

    def __init__(self, pids: dict[str, int], interval: float = 0.1) -> None:
        self.pids = pids
        self.interval = interval
        self.times: list[float] = []
        self.values: list[dict[str, float]] = []

    def sample(self) -> None:
        row = {}
        for name, pid in self.pids.items():
            try:
                row[name] = cpu_seconds(pid)
            except (OSError, IndexError, ValueError):
                row[name] = self.values[-1].get(name, 0.0) if self.values else 0.0
        row["machine"] = machine_busy_seconds()
        self.times.append(time.monotonic())
        self.values.append(row)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def at(self, t: float) -> dict[str, float]:
        """Linear interpolation between the samples around ``t``."""
        i = bisect_left(self.times, t)
        if i <= 0:
            return self.values[0]
        if i >= len(self.times):
            return self.values[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        a, b = self.values[i - 1], self.values[i]
        return {k: a.get(k, 0.0) + w * (b[k] - a.get(k, 0.0)) for k in b}

    def between(self, t0: float, t1: float) -> dict[str, float]:
        a, b = self.at(t0), self.at(t1)
        return {k: b[k] - a.get(k, 0.0) for k in b}


# ------------------------------------------------------------------------------------ pod watch
class PodWatch:
    """LIST+WATCH of the benchmark namespace's pods and Scheduled events: when each pod was first
    seen, first bound, and when its first Scheduled event appeared. A pod counts as scheduled
    once both are there (``scheduled``)."""

    def __init__(self, client: KubeClient) -> None:
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.event: dict[str, float] = {}
        self.node: dict[str, str] = {}
        self.claimed: dict[str, float] = {}  # DRA: when the pod's status first named its claim
        self.rebound: list[str] = []
        self.informer = Informer(client, f"/api/v1/namespaces/{NAMESPACE}/pods", self.on_pod, "bench-pods")
        self.events = Informer(client, f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events", self.on_event,
                               "bench-events")

    def on_event(self, kind: str, obj: dict) -> None:
        if kind == "DELETED" or obj.get("reason") != "Scheduled":
            return
        name = (obj.get("regarding") or {}).get("name")
        if name:
            self.event.setdefault(name, time.monotonic())

    def scheduled(self, name: str) -> float | None:
        """When the pod was bound and had its Scheduled event, whichever came last."""
        b, e = self.bound.get(name), self.event.get(name)
        return None if b is None or e is None else max(b, e)

    def count_scheduled(self, names: list[str]) -> int:
        return sum(1 for n in names if n in self.bound and n in self.event)

    def on_pod(self, kind: str, obj: dict) -> None:
        if kind == "DELETED":
            return
        t = time.monotonic()
        name = obj["metadata"]["name"]
        self.added.setdefault(name, t)
        if name not in self.claimed and dra.pod_claim_name(obj):
            self.claimed[name] = t
        node = (obj.get("spec") or {}).get("nodeName")
        if node:
            prev = self.node.get(name)
            if prev is None:
                self.node[name] = node
                self.bound[name] = t
            elif prev != node:
                self.rebound.append(f"{name}: {prev} -> {node}")

    def count(self, names: list[str], table: dict[str, Any]) -> int:
        return sum(1 for n in names if n in table)


async def wait_until(cond: Callable[[], bool], what: str, stall: float, progress_of: Callable[[], int],
                     alive: Callable[[], str | None] = lambda: None) -> None:
    """Poll ``cond``; fail when ``progress_of`` stops moving for ``stall`` seconds or ``alive`` says why."""
    last, last_t = progress_of(), time.monotonic()
    while not cond():
        await asyncio.sleep(0.05)
        why = alive()
        if why:
            raise BenchError(f"{what}: {why}")
        cur = progress_of()
        if cur != last:
            last, last_t = cur, time.monotonic()
        elif time.monotonic() - last_t > stall:
            raise BenchError(f"{what}: no progress for {stall:.0f}s ({cur} pods)")


# ------------------------------------------------------------------------------------ API helpers
async def create_all(client: KubeClient, path: str, bodies: list[dict], concurrency: int) -> None:
    it = iter(bodies)

    async def worker() -> None:
        for body in it:
            await client.post(path, body)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def create_paced(client: KubeClient, path: str, bodies: list[dict], rate: float) -> None:
    """Open loop: body i is sent at start + i / rate, whatever the answers take."""
    start = time.monotonic()
    tasks = []
    for i, body in enumerate(bodies):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(client.post(path, body)))
    await asyncio.gather(*tasks)


async def list_all(client: KubeClient, path: str) -> list[dict]:
    items, cont = [], None
    while True:
        params = {"limit": "1000", **({"continue": cont} if cont else {})}
        body = await client.request("GET", path, params=params)
        items += body.get("items") or []
        cont = (body.get("metadata") or {}).get("continue")
        if not cont:
            return items


async def scheduled_events(client: KubeClient, expected: int, quiet: float = 3.0) -> list[dict]:
    """The namespace's Scheduled events, once there are ``expected`` or no more arrive for ``quiet`` s."""
    last, since = -1, time.monotonic()
    while True:
        events = [e for e in await list_all(client, f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
                  if e.get("reason") == "Scheduled"]
        if len(events) != last:
            last, since = len(events), time.monotonic()
        if len(events) >= expected or time.monotonic() - since >= quiet:
            return events
        await asyncio.sleep(0.5)


def default_policy() -> dict:
    return yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def policy_has(plugin: str) -> bool:
    """Whether the ``default`` policy's chain has ``plugin`` (then so has the kube-same profile)."""
    return any(p.get("name") == plugin for p in default_policy()["spec"]["plugins"])


def shadow_rollout(which: str) -> dict:
    """spec.rollout of a shadow variant: strategy Shadow, the ``default`` policy's plugins as the
    candidate, with SHADOW_WEIGHTS (OURS_SHADOW) or NodeResourcesFit scoring SHADOW_FULL_STRATEGY
    (OURS_SHADOW_FULL). Checked against the operator's own test of the way the shadow takes."""
    spec = default_policy()["spec"]
    plugins = copy.deepcopy(spec["plugins"])
    for p in plugins:
        if which == OURS_SHADOW and p["name"] in SHADOW_WEIGHTS:
            p["weight"] = SHADOW_WEIGHTS[p["name"]]
        elif which == OURS_SHADOW_FULL and p["name"] == "NodeResourcesFit":
            p["args"]["scoringStrategy"]["type"] = SHADOW_FULL_STRATEGY
    rollout = {"strategy": "Shadow", "candidate": {"plugins": plugins}}
    parsed = SchedulingPolicySpec.model_validate({**spec, "rollout": rollout})
    shared = shares_filters(parsed, parsed.rollout.candidate)
    if shared != (which == OURS_SHADOW) or plugins == spec["plugins"]:
        raise BenchError(f"{LABEL[which]}: the candidate would take the {'shared' if shared else 'full'} way")
    return rollout


async def install_policy(client: KubeClient, which: str = OURS) -> None:
    crd = yaml.safe_load((ROOT / "crds" / "schedulingpolicies.yaml").read_text())
    await client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    policy = default_policy()
    if which == OURS_TUNING:
        policy["spec"]["tuning"] = TUNING
    elif which in SHADOWS:
        policy["spec"]["rollout"] = shadow_rollout(which)
    deadline = time.monotonic() + 30
    while True:
        conds = ((await client.get(path)).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
            try:
                await client.post("/apis/policy-scheduler.io/v1alpha1/schedulingpolicies", policy)
                return
            except ApiError as e:  # the new resource's endpoint can lag Established briefly
                if e.status != 404 or time.monotonic() > deadline:
                    raise
        if time.monotonic() > deadline:
            raise BenchError("the SchedulingPolicy CRD was not Established after 30s")
        await asyncio.sleep(0.2)


async def tuning_status(client: KubeClient, timeout: float) -> dict:
    """status.tuning of the default policy once its first evaluation over placed pods is written."""
    deadline = time.monotonic() + timeout
    while True:
        st = ((await client.get("/apis/policy-scheduler.io/v1alpha1/schedulingpolicies/default"))
              .get("status") or {}).get("tuning") or {}
        if st.get("replays") or time.monotonic() > deadline:
            return st
        await asyncio.sleep(1)


async def shadow_status(client: KubeClient, expected: int, quiet: float = 6.0, timeout: float = 60.0) -> dict:
    """status.rollout of the default policy once its shadow tally has settled: ``compared`` has
    reached ``expected``, or the tally has not moved for ``quiet`` seconds (the operator writes
    the status every 2 s, so the last decisions show up to that late)."""
    deadline = time.monotonic() + timeout
    last: tuple | None = None
    since = time.monotonic()
    while True:
        ro = ((await client.get("/apis/policy-scheduler.io/v1alpha1/schedulingpolicies/default"))
              .get("status") or {}).get("rollout") or {}
        sh = ro.get("shadow") or {}
        cur = (sh.get("compared"), sh.get("changed"))
        if cur != last:
            last, since = cur, time.monotonic()
        if (sh.get("compared") or 0) >= expected or time.monotonic() - since >= quiet \
                or time.monotonic() > deadline:
            return ro
        await asyncio.sleep(0.5)


async def shadow_figures(client: KubeClient, metrics: str, attempts_metric: str, pods: int) -> dict[str, Any]:
    """The shadow's tally from the policy's status.rollout.shadow, read from the API server while
    the scheduler still runs. The candidate decides beside every cycle of the policy's pods, so
    ``compared`` should be the pods (each decided once when none failed) plus the failed attempts
    the scheduler's own metrics count; its own counter of shadow decisions is reported beside."""
    failed = sum(metric_sum(metrics, attempts_metric, result=r) or 0 for r in ("unschedulable", "error"))
    t0 = time.monotonic()
    ro = await shadow_status(client, pods + failed)
    sh = ro.get("shadow") or {}
    out = {"phase": ro.get("phase"), "compared": sh.get("compared"), "changed": sh.get("changed"),
           "became_unschedulable": sh.get("becameUnschedulable"), "became_schedulable": sh.get("becameSchedulable"),
           "plugins": {p.get("name"): p.get("changed") for p in sh.get("plugins") or []},
           "expected": pods + failed, "pods": pods, "failed_attempts": failed,
           "metric_compared": metric_sum(metrics, "policy_scheduler_rollout_shadow_decisions_total"),
           "metric_changed": metric_sum(metrics, "policy_scheduler_rollout_shadow_decisions_total", outcome="changed"),
           "read_s": round(time.monotonic() - t0, 1)}
    progress(f"  shadow: phase {out['phase']}, compared {out['compared']} (expected {out['expected']}), "
             f"changed {out['changed']}; read after {out['read_s']}s")
    return out


async def scrape(url: str, ssl_ctx: ssl.SSLContext | bool) -> str:
    try:
        async with aiohttp.ClientSession() as s, s.get(url, ssl=ssl_ctx, timeout=aiohttp.ClientTimeout(10)) as r:
            return await r.text() if r.status == 200 else ""
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return ""


def metric_sum(text: str, name: str, **labels: str) -> int | None:
    """Sum of a Prometheus metric's samples whose labels include ``labels`` (None if absent)."""
    total, found = 0.0, False
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(w in line for w in want):
                total += float(line.rsplit(" ", 1)[1])
                found = True
    return int(total) if found else None


# ------------------------------------------------------------------------------------ schedulers
@dataclass
class Proc:
    """A running scheduler process: its pid, log, how to read its metrics and how to stop it."""

    pid: int
    log: Path
    stop: Callable[[], None]
    metrics_url: str = ""
    metric: str = ""

    def exited(self) -> str | None:
        if localcluster.pid_alive(self.pid):
            return None
        return f"the scheduler process exited. Last lines of {self.log}:\n{localcluster.tail(self.log, 30)}"


def start_popen(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def terminate(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def same_plugins_config(gangs: bool) -> str:
    """A KubeSchedulerConfiguration profile with exactly the ``default`` policy's plugins, weights
    and args (plus the two our chain adds implicitly: SchedulingGates, DefaultBinder), every
    other default plugin disabled: DynamicResources is in it when the policy has it.
    GangScheduling only with the gang gates (kube-scheduler has it only then; without them ours
    passes every pod in no group at once)."""
    policy = default_policy()
    plugins = [p for p in policy["spec"]["plugins"] if gangs or p["name"] != "GangScheduling"]
    enabled = [{"name": "SchedulingGates"}]
    enabled += [{"name": p["name"], **({"weight": p["weight"]} if "weight" in p else {})} for p in plugins]
    enabled.append({"name": "DefaultBinder"})
    profile = {"schedulerName": SCHEDULER_NAME[KUBE_SAME],
               "plugins": {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}},
               "pluginConfig": [{"name": p["name"], "args": p["args"]} for p in plugins if p.get("args")]}
    return yaml.safe_dump({"profiles": [profile]}, sort_keys=False)


def minimal_config() -> str:
    """A KubeSchedulerConfiguration profile with only what kube-scheduler cannot run without: the
    queue's sort (PrioritySort) and the binder (DefaultBinder), and SchedulingGates (PreEnqueue
    alone: a gated pod never reaches the queue, as the bare binder skips it too). No PreFilter,
    Filter or Score: every node is feasible (it still stops at numFeasibleNodesToFind) and any is
    chosen. What is left is the queue, the cache, the Binding and the Scheduled event through
    client-go: the fastest any scheduler binds against this API server. Like the bare binder it
    places pods where the workload's constraints forbid, so check_run leaves its placements
    unchecked (and the churn's unschedulable pods, which it binds)."""
    enabled = [{"name": "PrioritySort"}, {"name": "SchedulingGates"}, {"name": "DefaultBinder"}]
    profile = {"schedulerName": SCHEDULER_NAME[KUBE_MIN],
               "plugins": {"multiPoint": {"enabled": enabled, "disabled": [{"name": "*"}]}}}
    return yaml.safe_dump({"profiles": [profile]}, sort_keys=False)


async def start_scheduler(which: str, plan: RunPlan, cluster: localcluster.LocalCluster,
                          a: argparse.Namespace) -> Proc:
    kc = str(cluster.admin_kubeconfig)
    run_dir = plan.run_dir
    if which in KUBES:
        extra = (same_plugins_config(plan.workload.gangs) if which == KUBE_SAME else
                 minimal_config() if which == KUBE_MIN else "")
        await asyncio.to_thread(cluster.start_scheduler, a.qps, a.burst, None, extra)
        info = cluster.state["procs"]["kube-scheduler"]
        cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes().decode().split("\0")
        port = next(x.split("=", 1)[1] for x in cmdline if x.startswith("--secure-port="))
        return Proc(info["pid"], Path(info["log"]), lambda: cluster.stop("kube-scheduler"),
                    f"https://127.0.0.1:{port}/metrics", "scheduler_schedule_attempts_total")
    if which in OURS_ALL:
        port = localcluster.free_port()
        args = [sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig", kc, "--qps", str(a.qps),
                "--burst", str(a.burst), "--bind-concurrency", str(a.bind_concurrency),
                "--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--health-port", "0",
                # kube-scheduler runs with leaderElect: false here (hack/localcluster.py): so do we
                "--leader-elect=false", *(["--suggestions=off"] if which == OURS_NO_HINTS else []), *a.operator_arg]
        p = start_popen(args, run_dir / "policy-scheduler.log")
        return Proc(p.pid, run_dir / "policy-scheduler.log", lambda: terminate(p),
                    f"http://127.0.0.1:{port}/metrics", "scheduler_schedule_attempts_total")
    args = [sys.executable, str(Path(__file__).resolve()), "binder", "--kubeconfig", kc, "--qps", str(a.qps),
            "--burst", str(a.burst), "--concurrency", str(a.bind_concurrency),
            *(["--dra"] if plan.workload.dra else [])]
    p = start_popen(args, run_dir / "binder.log")
    return Proc(p.pid, run_dir / "binder.log", lambda: terminate(p))


STARTUP_MILESTONES = (("running", " starting: scheduler name "), ("cache_synced", " cache synced in "),
                      ("scheduling", " scheduling: "))


def startup_breakdown(log: Path, t_spawn_wall: float, first_scheduled_s: float) -> dict[str, float]:
    """policy-scheduler's start-up in steps, seconds from its spawn: ``running`` (its first log
    line: interpreter and imports done), ``cache_synced`` (every informer listed),
    ``scheduling`` (the loop took its first pods), ``first_scheduled`` (the first pod bound with
    its Scheduled event, as the benchmark's watch saw it). Log times have millisecond resolution."""
    out: dict[str, float] = {}
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    starts = [i for i, x in enumerate(lines) if STARTUP_MILESTONES[0][1] in x]
    lines = lines[starts[-1]:] if starts else []  # this run's (a reused --out directory appends)
    for key, needle in STARTUP_MILESTONES:
        line = next((x for x in lines if needle in x), None)
        if line is None:
            continue
        try:
            t = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        out[key] = round(t - t_spawn_wall, 3)
    out["first_scheduled"] = first_scheduled_s
    return out


def log_findings(which: str, log: Path) -> dict[str, Any]:
    """Warnings, errors and binding conflicts in a scheduler's log."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    if which in OURS_ALL:
        bad = [x for x in lines if " WARNING " in x or " ERROR " in x or "Traceback" in x]
        conflicts = sum(1 for x in lines if "not needed" in x and "HTTP 409" in x)
    elif which in KUBES:
        bad = [x for x in lines if x[:1] in ("E", "W") and x[1:5].isdigit()]  # klog severity prefix
        conflicts = sum(1 for x in lines if "already assigned" in x)
    else:
        summary = next((json.loads(x) for x in reversed(lines) if x.startswith("{")), {})
        bad = [x for x in lines if x.startswith("bind error")]
        conflicts = summary.get("conflicts", 0)
    return {"warnings_or_errors": len(bad), "first": bad[:5], "bind_conflicts": conflicts}


# ------------------------------------------------------------------------------------ one run
def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))] if s else float("nan")


def window_rate(ts: list[float]) -> float:
    """pods/s between the 10% and the 90% of sorted times ``ts``."""
    n = len(ts)
    lo, hi = int(0.1 * (n - 1)), max(1, int(0.9 * (n - 1)))
    return round((hi - lo) / max(ts[hi] - ts[lo], 1e-6), 1)


def throughput_figures(done_t: list[float], bound_t: list[float], event_t: list[float], t_start: float,
                       sampler: Sampler) -> dict[str, Any]:
    """pods/s between the 10% and the 90% scheduled pod (bound, with its Scheduled event), CPU
    of the processes in that window and over the whole run (start to the last pod scheduled)."""
    n = len(done_t)
    lo, hi = int(0.1 * (n - 1)), max(1, int(0.9 * (n - 1)))
    t10, t90, t_last = done_t[lo], done_t[hi], done_t[-1]
    window = max(t90 - t10, 1e-6)
    cpu = sampler.between(t10, t90)
    run = sampler.between(t_start, t_last)
    cores = {k: round(v / window, 2) for k, v in cpu.items()}
    per_second = [0] * (int(t_last - t_start) + 1)
    for t in done_t:
        per_second[int(t - t_start)] += 1
    return {
        "pods_per_s": round((hi - lo) / window, 1), "pods_per_s_overall": round(n / (t_last - t_start), 1),
        "pods_per_s_bound_only": window_rate(bound_t),
        "startup_s": round(done_t[0] - t_start, 2), "makespan_s": round(t_last - t_start, 2),
        "last_bound_s": round(bound_t[-1] - t_start, 2), "last_event_s": round(event_t[-1] - t_start, 2),
        "cpu_s": round(run["scheduler"], 2),
        "cpu_ms_per_pod": round(1000 * cpu["scheduler"] / (hi - lo), 3),
        "cpu_ms_per_pod_run": round(1000 * run["scheduler"] / n, 3),
        "apiserver_cpu_s_run": round(run["apiserver"], 2), "etcd_cpu_s_run": round(run["etcd"], 2),
        "cpu_cores_in_window": cores["scheduler"], "apiserver_cores_in_window": cores["apiserver"],
        "etcd_cores_in_window": cores["etcd"], "bench_cores_in_window": cores["bench"],
        # everything else on the machine: other users of the cores make every figure noisier
        "other_cores_in_window": round(max(0.0, cpu["machine"] - sum(
            cpu[k] for k in ("scheduler", "apiserver", "etcd", "bench"))) / window, 2),
        "bound_per_second": per_second,
    }


def latency_figures(added: list[float], bound: list[float], rate: float) -> dict[str, Any]:
    """Creation-to-bound latency at a steady offered ``rate``; the worst per second of creation
    shows stalls and when they happen."""
    lats = [1000 * (b - a) for a, b in zip(added, bound)]
    span = max(bound) - min(added)
    achieved = len(lats) / span if span > 0 else float("inf")
    worst = [0.0] * (int(max(added) - min(added)) + 1)
    for a, ms in zip(added, lats):
        i = int(a - min(added))
        worst[i] = max(worst[i], round(ms, 1))
    return {"rate": rate, "pods": len(lats), "p50_ms": round(percentile(lats, 50), 1),
            "p99_ms": round(percentile(lats, 99), 1), "max_ms": round(max(lats), 1),
            "achieved_rate": round(achieved, 1), "saturated": achieved < 0.9 * rate, "max_ms_per_second": worst}


def group_figures(wl: Workload, names: list[str], watch: PodWatch, t_start: float,
                  t_first: float) -> dict[str, Any]:
    """Per group: whole = its last member scheduled (bound, with its Scheduled event), seconds
    after the scheduler's start; its latency = whole less when it could first be tried (its last
    member created, as the watch saw it, or the scheduler's start if later), averaged over the
    groups; and the same from the first pod scheduled (``t_first``: start-up left out)."""
    whole: dict[str, float] = defaultdict(float)
    ready: dict[str, float] = defaultdict(float)
    for i, n in enumerate(names):
        g = wl.group("t", i)
        whole[g] = max(whole[g], watch.scheduled(n))
        ready[g] = max(ready[g], watch.added[n])
    lat = [whole[g] - max(ready[g], t_start) for g in whole]
    lat_first = [whole[g] - max(ready[g], t_first) for g in whole]
    out = {"groups_whole_s": sorted(round(v - t_start, 2) for v in whole.values())}
    out["last_group_whole_s"] = out["groups_whole_s"][-1]
    out["group_latency_s"] = round(sum(lat) / len(lat), 3)
    out["group_latency_after_startup_s"] = round(sum(lat_first) / len(lat_first), 3)
    return out


@dataclass
class RunPlan:
    workload: Workload
    nodes: int
    pods: int
    latency_pods: int
    init_per_node: int  # pods bound up front on every node
    run_dir: Path
    dra_devices: int = 0  # DRA: devices per node (one ResourceSlice each)
    dra_init: int = 0  # DRA: pods scheduled before the measured ones, not measured
    gated: int = 0  # pods gated for good, created before the measured ones
    unplaceable: int = 0  # --unplaceable: pods that fit no node, created before the measured ones


async def run_latency(client: KubeClient, watch: PodWatch, plan: RunPlan, which: str, proc: Proc, prefix: str,
                      rate: float, a: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """A steady stream of ``plan.latency_pods`` new pods at ``rate``: creation to scheduled."""
    wl, sched_name = plan.workload, SCHEDULER_NAME[which]
    names = [f"{prefix}-{i:06d}" for i in range(plan.latency_pods)]
    progress(f"  latency phase {prefix}: {plan.latency_pods} pods at {rate} pods/s")
    creating = asyncio.create_task(create_paced(
        client, f"/api/v1/namespaces/{NAMESPACE}/pods",
        [wl.pod(prefix, i, sched_name, plan.nodes) for i in range(plan.latency_pods)], rate))
    await wait_until(lambda: creating.done() and watch.count_scheduled(names) >= len(names),
                     f"{LABEL[which]}, latency phase {prefix}: scheduled", a.stall_timeout,
                     lambda: len(watch.event), proc.exited)
    await creating
    fig = latency_figures([watch.added[n] for n in names], [watch.scheduled(n) for n in names], rate)
    progress(f"  latency p50 {fig['p50_ms']} ms, p99 {fig['p99_ms']} ms")
    return names, fig


def decision_time(metrics: str, before: str = "") -> dict[str, Any]:
    """Decision time per scheduling attempt, as both schedulers measure it: the sum of
    scheduler_framework_extension_point_duration_seconds over PreFilter, Filter, PostFilter,
    PreScore and Score, divided by the attempts (PreFilter's count); and the mean of
    scheduler_scheduling_attempt_duration_seconds (the whole attempt, binding included). With
    ``before`` (a scrape of the same process), only the attempts made since."""
    total, count, att_sum, att_count = (a - b for a, b in zip(_decision_sums(metrics), _decision_sums(before)))
    out: dict[str, Any] = {}
    if count:
        out.update(attempts=int(count), mean_ms=round(1000 * total / count, 3))
    if att_count:
        out["attempt_mean_ms"] = round(1000 * att_sum / att_count, 3)
    return out


def _decision_sums(metrics: str) -> tuple[float, float, float, float]:
    name = "scheduler_framework_extension_point_duration_seconds"
    points = ("PreFilter", "Filter", "PostFilter", "PreScore", "Score")
    total = count = att_sum = att_count = 0.0
    for line in metrics.splitlines():
        value = line.rsplit(" ", 1)[-1]
        if line.startswith(name + "_sum{") or line.startswith(name + "_count{"):
            point = re.search(r'extension_point="([^"]+)"', line)
            if point and point.group(1) in points:
                if "_sum{" in line:
                    total += float(value)
                elif point.group(1) == "PreFilter":
                    count += float(value)
        elif line.startswith("scheduler_scheduling_attempt_duration_seconds_sum"):
            att_sum += float(value)
        elif line.startswith("scheduler_scheduling_attempt_duration_seconds_count"):
            att_count += float(value)
    return total, count, att_sum, att_count


def group_attempt_time(metrics: str) -> dict[str, Any]:
    """The pod-group scheduling attempts as both schedulers measure them (kube-scheduler 1.37's
    scheduler_podgroup_scheduling_attempt_duration_seconds, every result, and
    scheduler_podgroup_scheduling_algorithm_duration_seconds): attempts and mean ms."""
    sums: dict[str, float] = defaultdict(float)
    for line in metrics.splitlines():
        for fam in ("scheduler_podgroup_scheduling_attempt_duration_seconds",
                    "scheduler_podgroup_scheduling_algorithm_duration_seconds"):
            for part in ("_sum", "_count"):
                if line.startswith(fam + part + "{") or line.startswith(fam + part + " "):
                    sums[fam + part] += float(line.rsplit(" ", 1)[-1])
    out: dict[str, Any] = {}
    att = "scheduler_podgroup_scheduling_attempt_duration_seconds"
    alg = "scheduler_podgroup_scheduling_algorithm_duration_seconds"
    if sums.get(att + "_count"):
        out.update(attempts=int(sums[att + "_count"]),
                   mean_ms=round(1000 * sums[att + "_sum"] / sums[att + "_count"], 3))
    if sums.get(alg + "_count"):
        out["algorithm_mean_ms"] = round(1000 * sums[alg + "_sum"] / sums[alg + "_count"], 3)
    return out


async def api_requests(client: KubeClient) -> Counter:
    """The API server's apiserver_request_total, summed by verb, resource and subresource."""
    text = await client.request("GET", "/metrics")
    out: Counter = Counter()
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            key = " ".join(x for x in (labels.get("verb", ""), labels.get("resource", ""),
                                       labels.get("subresource", "")) if x)
            out[key] += int(float(line.rsplit(" ", 1)[1]))
    return out


class Churn:
    """Upstream's churn op during the measured window: every CHURN_INTERVAL[mode] seconds one tick.
    "create": the tick creates an unschedulable pod (they stay); "recreate" (number 1): a tick
    creates a node, a pod and a Service, the next deletes them, and so on."""

    def __init__(self, client: KubeClient, wl: Workload, scheduler_name: str) -> None:
        self.client, self.wl, self.scheduler_name = client, wl, scheduler_name
        self.counts: Counter = Counter()
        self.live: list[tuple[str, dict]] = []
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        interval, start = CHURN_INTERVAL[self.wl.churn], time.monotonic()
        for k in itertools.count():
            await asyncio.sleep(max(0.0, start + (k + 1) * interval - time.monotonic()))
            try:
                if self.wl.churn == "recreate" and self.live:
                    for path, body in self.live:
                        name = body["metadata"]["name"]
                        await self.client.request("DELETE", f"{path}/{name}",
                                                  {"apiVersion": "v1", "kind": "DeleteOptions",
                                                   "gracePeriodSeconds": 0})
                        self.counts[f"{body['kind'].lower()}s_deleted"] += 1
                    self.live = []
                    continue
                for path, body in self.wl.churn_objects(k, self.scheduler_name):
                    await self.client.post(path, body)
                    self.counts[f"{body['kind'].lower()}s_created"] += 1
                    self.live.append((path, body))
            except ApiError as e:
                self.counts["errors"] += 1
                progress(f"  churn: {e}")

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self.run())
        return self.task

    async def stop(self) -> None:
        """Stop ticking; what was created stays (upstream leaves it too)."""
        if self.task:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def summary(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


async def measure(which: str, plan: RunPlan, cluster: localcluster.LocalCluster, a: argparse.Namespace) -> dict:
    wl = plan.workload
    creds = load_credentials(cluster.admin_kubeconfig)
    client = KubeClient(creds, qps=0, burst=1, timeout=120, user_agent="bench")
    tasks: list[asyncio.Task] = []
    proc: Proc | None = None
    try:
        await client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}})
        nodes = {b["metadata"]["name"]: b for b in (wl.node(i, a.kwok) for i in range(plan.nodes))}
        await create_all(client, "/api/v1/nodes", list(nodes.values()), 32)
        if which in OURS_ALL:
            await install_policy(client, which)
        if wl.preempts or wl.churn:  # the churn's unschedulable pods are of bench-high (priority 10)
            for pc in ((LOW_PRIORITY, wl.high_priority) if wl.gangs else (wl.high_priority,)):
                await client.post("/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc},
                    "value": PRIORITY_VALUES[pc]})
        if plan.init_per_node:
            t0 = time.monotonic()
            await create_all(client, f"/api/v1/namespaces/{NAMESPACE}/pods",
                             wl.init_pods(plan.nodes, plan.init_per_node), a.create_concurrency)
            progress(f"  {plan.nodes * plan.init_per_node} pods created bound in {time.monotonic() - t0:.0f}s")
        watch = PodWatch(client)
        tasks.append(asyncio.create_task(watch.informer.run()))
        tasks.append(asyncio.create_task(watch.events.run()))
        await asyncio.wait_for(watch.informer.synced.wait(), 120)
        await asyncio.wait_for(watch.events.synced.wait(), 30)

        sched_name = SCHEDULER_NAME[which]
        pod_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        names = [f"t-{i:06d}" for i in range(plan.pods)]
        if plan.gated:  # before the measured pods, as upstream's (there: enqueued and attempted first)
            t0 = time.monotonic()
            await create_all(client, pod_path, [wl.gated_pod(i, sched_name) for i in range(plan.gated)],
                             a.create_concurrency)
            progress(f"  {plan.gated} gated pods created in {time.monotonic() - t0:.0f}s")
        if plan.unplaceable:  # before the measured pods: tried first, then pending for good
            t0 = time.monotonic()
            await create_all(client, pod_path, [wl.unplaceable_pod(i, sched_name) for i in range(plan.unplaceable)],
                             a.create_concurrency)
            progress(f"  {plan.unplaceable} pods that fit no node created in {time.monotonic() - t0:.0f}s")
        if wl.gangs:  # the groups first, as a job controller would make them
            await create_all(client, f"/apis/scheduling.k8s.io/{localcluster.GANG_API_VERSION}/namespaces/"
                             f"{NAMESPACE}/podgroups", wl.pod_groups("t", plan.pods), 8)
        t0 = time.monotonic()
        await create_all(client, pod_path, [wl.pod("t", i, sched_name, plan.nodes) for i in range(plan.pods)],
                         a.create_concurrency)
        await wait_until(lambda: watch.count(names, watch.added) >= plan.pods, "pods to appear in the watch", 30,
                         lambda: len(watch.added))
        created_rate = plan.pods / (time.monotonic() - t0)
        pids = {"apiserver": cluster.state["procs"]["kube-apiserver"]["pid"],
                "etcd": cluster.state["procs"]["etcd"]["pid"], "bench": os.getpid()}
        await settle(pids)

        # ---- throughput: the scheduler starts with every measured pod pending
        requests_before = await api_requests(client)
        load = os.getloadavg()[0]
        sampler = Sampler(pids)
        t_start = time.monotonic()
        t_start_wall = time.time()
        sampler.sample()  # the scheduler has used no CPU yet: its column reads 0 here
        churn = Churn(client, wl, sched_name) if wl.churn else None
        if churn:  # from the scheduler's start to the last measured pod scheduled, the same for every scheduler
            tasks.append(churn.start())
        proc = await start_scheduler(which, plan, cluster, a)
        sampler.pids["scheduler"] = proc.pid
        tasks.append(asyncio.create_task(sampler.run()))
        progress(f"  {plan.pods} pods pending ({created_rate:.0f} created/s); {LABEL[which]} started")
        await wait_until(lambda: watch.count_scheduled(names) >= plan.pods,
                         f"{LABEL[which]}: scheduled (bound, with a Scheduled event)",
                         a.stall_timeout, lambda: len(watch.bound) + len(watch.event), proc.exited)
        sampler.sample()  # at least one sample after the last pod, however short the run
        if churn:
            await churn.stop()
            progress(f"  churn: {churn.summary()}")
        res = {"scheduler": which,
               **throughput_figures(sorted(watch.scheduled(n) for n in names), sorted(watch.bound[n] for n in names),
                                    sorted(watch.event[n] for n in names), t_start, sampler),
               "loadavg_at_start": round(load, 2)}
        if churn:
            res["churn"] = churn.summary()
        if which in OURS_ALL:  # where the start-up goes: its log's milestones, from the process's spawn
            res["startup_breakdown"] = startup_breakdown(proc.log, t_start_wall, res["startup_s"])
            progress("  start-up: " + ", ".join(f"{k} {v}s" for k, v in res["startup_breakdown"].items()))
        if wl.gangs:  # when each group became whole: its last member scheduled, from the scheduler's start
            res.update(group_figures(wl, names, watch, t_start, t_start + res["startup_s"]))
            progress(f"  {len(res['groups_whole_s'])} groups whole; the first after {res['groups_whole_s'][0]}s, "
                     f"the last after {res['last_group_whole_s']}s; group latency {res['group_latency_s']}s "
                     f"avg ({res['group_latency_after_startup_s']}s from the first pod scheduled)")
        progress(f"  throughput {res['pods_per_s']} pods/s (10-90%), start-up {res['startup_s']}s, "
                 f"last event {res['last_event_s']}s, CPU {res['cpu_ms_per_pod_run']} ms/pod over the run")
        metrics_before = await scrape(proc.metrics_url, metrics_ssl(cluster)) if proc.metrics_url else ""
        # what the API server served during the throughput phase, per measured pod (the benchmark's
        # own watches and LISTs included, the same for every scheduler)
        reqs = await api_requests(client) - requests_before
        res["api_requests_per_pod"] = {k: round(v / plan.pods, 2) for k, v in reqs.most_common()
                                       if v / plan.pods >= 0.05}
        if which == OURS_TUNING:  # what the tuner did while the pods were scheduled, and its first evaluation
            res["tuning"] = {"evaluations": metric_sum(metrics_before, "policy_scheduler_tuning_evaluations_total")}
            first = await tuning_status(client, 120)
            res["tuning"]["first"] = {k: first.get(k) for k in ("windowPods", "replays", "seconds", "yieldedSeconds",
                                                                "stopped", "evaluatedTime", "summary")}
            progress(f"  the tuner's first evaluation (due {TUNING['interval']} after the start, in the burst): "
                     f"{first.get('windowPods')} pods, "
                     f"{first.get('replays')} replays in {first.get('seconds')} s, of which "
                     f"{first.get('yieldedSeconds')} s waiting for the scheduler's queue to empty")

        # ---- latency: steady streams of new pods below saturation, at a share of this
        # scheduler's own throughput, then at one rate common to every scheduler
        lat_names: list[str] = []
        if plan.latency_pods > 0:
            await settle(pids)  # the last Scheduled events and the watch fan-out of the burst
            own = round(a.latency_load * res["pods_per_s"], 1)
            got, res["latency"] = await run_latency(client, watch, plan, which, proc, "l", own, a)
            lat_names += got
            if a.latency_rate:
                await settle(pids)
                got, res["latency_common"] = await run_latency(client, watch, plan, which, proc, "c",
                                                               a.latency_rate, a)
                lat_names += got
        res["peak_rss_mb"] = round(peak_rss_mb(proc.pid), 1)
        res["cpu_s_total"] = round(cpu_seconds(proc.pid), 2)
        events = await scheduled_events(client, len(names) + len(lat_names))  # every one is in the watch already
        metrics = await scrape(proc.metrics_url, metrics_ssl(cluster)) if proc.metrics_url else ""
        if which in SHADOWS:  # the shadow's tally, before the scheduler (and its status writer) stops
            res["shadow"] = await shadow_figures(client, metrics, proc.metric, len(names) + len(lat_names))
        res["decision"] = decision_time(metrics_before)  # the throughput phase's attempts
        if wl.gangs:
            res["group_attempt"] = group_attempt_time(metrics_before)
        t_stop = time.monotonic()
        await asyncio.to_thread(proc.stop)
        res["stop_s"] = round(time.monotonic() - t_stop, 2)
        stopped, proc = proc, None

        # ---- checks, on the final state
        pods = await list_all(client, pod_path)
        res["checks"] = check_run(which, plan, watch, names + lat_names, pods, nodes, events, metrics, stopped,
                                  res.get("shadow"))
        return res
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if proc is not None:
            await asyncio.to_thread(proc.stop)
        await client.close()


# ------------------------------------------------------------------------------------ DRA
DRA_PATH = f"/apis/{dra.API}"
CLAIMS_PATH = f"{DRA_PATH}/namespaces/{NAMESPACE}/resourceclaims"


def start_claim_controller(cluster: localcluster.LocalCluster, a: argparse.Namespace) -> None:
    """kube-controller-manager with only the resourceclaim controller (it makes the claims of the
    pods' templates, and deallocates and frees claims whose pods are gone), with the client
    limits of the schedulers: at its default of 20 QPS it would be the bottleneck (upstream's
    scheduler_perf runs this controller in its own process, on the test's client)."""
    limits = [f"--kube-api-qps={a.qps}", f"--kube-api-burst={a.burst}"]
    cluster.start_controller_manager(controllers=dra.CONTROLLERS, extra=limits)
    cmdline = Path(f"/proc/{cluster.state['procs']['kube-controller-manager']['pid']}/cmdline").read_bytes()
    if f"--kube-api-qps={a.qps}".encode() not in cmdline:
        raise BenchError("kube-controller-manager did not get --kube-api-qps")


def rel_quantiles(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(1000 * percentile(xs, 50), 1), "p99_ms": round(1000 * percentile(xs, 99), 1)} \
        if xs else {}


async def dra_objects(client: KubeClient, plan: RunPlan) -> None:
    """The DeviceClass, the ResourceSlices of every node (devices, and the shared counters of its
    partitionable devices) and the ResourceClaimTemplate."""
    await client.post(f"{DRA_PATH}/deviceclasses", dra.device_class())
    await create_all(client, f"{DRA_PATH}/resourceslices",
                     [s for i in range(plan.nodes) for s in dra.slices(i, plan.dra_devices)], 16)
    await client.post(f"{DRA_PATH}/namespaces/{NAMESPACE}/resourceclaimtemplates", dra.claim_template(NAMESPACE))


async def dra_cleanup(client: KubeClient, timeout: float = 180) -> dict[str, Any]:
    """Delete the pods (at once: no kubelet here) and their claims, then wait until no claim is
    left: the resourceclaim controller drops the gone pods from reservedFor, deallocates and
    removes the finalizer, and the claim goes. Raises BenchError when claims stay."""
    t0 = time.monotonic()
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    await client.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", now)
    await client.request("DELETE", CLAIMS_PATH, now)
    while True:
        claims = await list_all(client, CLAIMS_PATH)
        pods = await list_all(client, f"/api/v1/namespaces/{NAMESPACE}/pods")
        if not claims and not pods:
            return {"cleanup_s": round(time.monotonic() - t0, 1)}
        if time.monotonic() - t0 > timeout:
            alloc = sum(1 for c in claims if (c.get("status") or {}).get("allocation"))
            raise BenchError(f"cleanup: after {timeout:.0f}s {len(pods)} pods and {len(claims)} claims are left, "
                             f"{alloc} of them allocated")
        await asyncio.sleep(0.5)


async def measure_dra(which: str, plan: RunPlan, cluster: localcluster.LocalCluster, a: argparse.Namespace) -> dict:
    """The DRA workload: the scheduler starts and schedules the first ``plan.dra_init`` pods (not
    measured), then the measured pods are posted and pods/s is their count over the time from
    the first create to the last bound. Checks, then the cleanup (pods and claims deleted, every
    device free again)."""
    wl = plan.workload
    client = KubeClient(load_credentials(cluster.admin_kubeconfig), qps=0, burst=1, timeout=120, user_agent="bench")
    tasks: list[asyncio.Task] = []
    proc: Proc | None = None
    try:
        await client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}})
        nodes = {b["metadata"]["name"]: b for b in (wl.node(i, a.kwok) for i in range(plan.nodes))}
        await create_all(client, "/api/v1/nodes", list(nodes.values()), 32)
        await dra_objects(client, plan)
        if which in OURS_ALL:
            await install_policy(client, which)
        watch = PodWatch(client)
        tasks.append(asyncio.create_task(watch.informer.run()))
        tasks.append(asyncio.create_task(watch.events.run()))
        await asyncio.wait_for(watch.informer.synced.wait(), 120)
        await asyncio.wait_for(watch.events.synced.wait(), 30)
        procs = cluster.state["procs"]
        pids = {"apiserver": procs["kube-apiserver"]["pid"], "etcd": procs["etcd"]["pid"],
                "controller": procs["kube-controller-manager"]["pid"], "bench": os.getpid()}
        await settle(pids)
        sched_name = SCHEDULER_NAME[which]
        pod_path = f"/api/v1/namespaces/{NAMESPACE}/pods"

        # ---- the scheduler starts; the pods scheduled first (upstream's init pods): not measured
        sampler = Sampler(pids)
        t_start = time.monotonic()
        sampler.sample()
        proc = await start_scheduler(which, plan, cluster, a)
        sampler.pids["scheduler"] = proc.pid
        tasks.append(asyncio.create_task(sampler.run()))
        init_names = [f"i-{i:06d}" for i in range(plan.dra_init)]
        progress(f"  {LABEL[which]} started; {plan.dra_init} pods to schedule first")
        await create_all(client, pod_path, [wl.pod("i", i, sched_name, plan.nodes) for i in range(plan.dra_init)],
                         a.create_concurrency)
        await wait_until(lambda: watch.count_scheduled(init_names) >= len(init_names),
                         f"{LABEL[which]}: the pods scheduled first", a.stall_timeout,
                         lambda: len(watch.bound) + len(watch.event) + len(watch.claimed), proc.exited)
        first = {"pods": len(init_names), "s": round(time.monotonic() - t_start, 2)}
        progress(f"  {len(init_names)} pods scheduled first in {first['s']}s (scheduler start included)")
        await settle(pids)

        # ---- throughput: the measured pods posted with the scheduler running
        names = [f"t-{i:06d}" for i in range(plan.pods)]
        bodies = [wl.pod("t", i, sched_name, plan.nodes) for i in range(plan.pods)]
        requests_before = await api_requests(client)
        metrics_start = await scrape(proc.metrics_url, metrics_ssl(cluster)) if proc.metrics_url else ""
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        await create_all(client, pod_path, bodies, a.create_concurrency)
        t_posted = time.monotonic()
        await wait_until(lambda: watch.count_scheduled(names) >= plan.pods,
                         f"{LABEL[which]}: scheduled (bound, with a Scheduled event)", a.stall_timeout,
                         lambda: len(watch.bound) + len(watch.event) + len(watch.claimed), proc.exited)
        sampler.sample()
        bound = sorted(watch.bound[n] for n in names)
        done = sorted(watch.scheduled(n) for n in names)
        claimed = sorted(watch.claimed[n] for n in names if n in watch.claimed)
        t_last = bound[-1]
        span = max(t_last - t0, 1e-6)
        cpu = sampler.between(t0, t_last)
        res: dict[str, Any] = {
            "scheduler": which,
            "pods_per_s": round(plan.pods / span, 1),  # first create to last bound
            "pods_per_s_overall": round(plan.pods / max(done[-1] - t0, 1e-6), 1),  # to the last Scheduled event
            "pods_per_s_window": window_rate(done),  # 10% to 90% pod scheduled
            "post_s": round(t_posted - t0, 2), "last_bound_s": round(t_last - t0, 2),
            "last_event_s": round(done[-1] - t0, 2),
            "last_claim_s": round(claimed[-1] - t0, 2) if claimed else None,
            "claim_after_create": rel_quantiles([watch.claimed[n] - watch.added[n] for n in names
                                                 if n in watch.claimed and n in watch.added]),
            "bound_after_claim": rel_quantiles([watch.bound[n] - watch.claimed[n] for n in names
                                                if n in watch.claimed]),
            "scheduled_first": first,
            "cpu_ms_per_pod": round(1000 * cpu["scheduler"] / plan.pods, 3),
            "cpu_cores_in_window": round(cpu["scheduler"] / span, 2),
            "apiserver_cpu_s": round(cpu["apiserver"], 2), "etcd_cpu_s": round(cpu["etcd"], 2),
            "controller_cpu_s": round(cpu["controller"], 2), "bench_cpu_s": round(cpu["bench"], 2),
            "other_cores_in_window": round(max(0.0, cpu["machine"] - sum(
                cpu[k] for k in ("scheduler", "apiserver", "etcd", "controller", "bench"))) / span, 2),
            "loadavg_at_start": round(load, 2),
        }
        progress(f"  {res['pods_per_s']} pods/s (first create to last bound: {plan.pods} pods in "
                 f"{res['last_bound_s']}s; posted in {res['post_s']}s, the last claim at {res['last_claim_s']}s)")
        metrics = await scrape(proc.metrics_url, metrics_ssl(cluster)) if proc.metrics_url else ""
        reqs = await api_requests(client) - requests_before
        res["api_requests_per_pod"] = {k: round(v / plan.pods, 2) for k, v in reqs.most_common()
                                       if v / plan.pods >= 0.05}
        res["decision"] = decision_time(metrics, metrics_start)
        res["peak_rss_mb"] = round(peak_rss_mb(proc.pid), 1)
        everyone = init_names + names
        events = await scheduled_events(client, len(everyone))
        t_stop = time.monotonic()
        await asyncio.to_thread(proc.stop)
        res["stop_s"] = round(time.monotonic() - t_stop, 2)
        stopped, proc = proc, None

        # ---- checks, on the final state; then every pod and claim goes, every device is free
        pods = await list_all(client, pod_path)
        claims = await list_all(client, CLAIMS_PATH)
        res["checks"] = check_run(which, plan, watch, everyone, pods, nodes, events, metrics, stopped)
        errors, tally = dra.check_claims(pods, claims, everyone)
        if errors:
            raise BenchError(f"{LABEL[which]} on {wl.name}: " + "; ".join(errors))
        res["checks"].update(tally)
        res["checks"].update(await dra_cleanup(client))
        progress(f"  checks passed: {tally['claims_allocated']} claims allocated, {tally['devices_allocated']} "
                 f"devices, none twice; cleanup (pods and claims gone, devices free) in {res['checks']['cleanup_s']}s")
        return res
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if proc is not None:
            await asyncio.to_thread(proc.stop)
        await client.close()


def metrics_ssl(cluster: localcluster.LocalCluster) -> ssl.SSLContext:
    """The admin client certificate, without verifying kube-scheduler's self-signed serving cert."""
    return cluster.admin_ssl()


async def settle(pids: dict[str, int], limit: float = 10.0) -> None:
    """Wait (up to ``limit``) until the API server and etcd are idle after the pod burst."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = {k: cpu_seconds(pids[k]) for k in ("apiserver", "etcd")}
        await asyncio.sleep(0.5)
        busy = sum(cpu_seconds(pids[k]) - before[k] for k in before) / 0.5
        if busy < 0.15:
            return


def check_run(which: str, plan: RunPlan, watch: PodWatch, names: list[str], pods: list[dict],
              nodes: dict[str, dict], events: list[dict], metrics: str, proc: Proc,
              shadow: dict | None = None) -> dict:
    errors: list[str] = []
    by_name = {p["metadata"]["name"]: p for p in pods}
    unbound = [n for n in names if not (by_name.get(n) or {}).get("spec", {}).get("nodeName")]
    if unbound:
        errors.append(f"{len(unbound)} pods not bound, e.g. {unbound[:5]}")
    # pods that must stay unbound: gated for good, or fitting no node (the churn's)
    held = {r: [p for p in pods if (p["metadata"].get("labels") or {}).get(ROLE) == r] for r in (GATED, UNSCHEDULABLE)}
    # the ceilings decide nothing: their placements, and the unschedulable pods kube-minimal binds
    # (it has no Filter; the bare binder skips them by their label), are not checked
    ceiling = which in (CEILING, KUBE_MIN)
    placed = [p["metadata"]["name"] for r, ps in held.items() if not (ceiling and r == UNSCHEDULABLE)
              for p in ps if p["spec"].get("nodeName")]
    if placed:
        errors.append(f"{len(placed)} pods bound that fit nowhere or are gated, e.g. {placed[:5]}")
    ungated = [p["metadata"]["name"] for p in held[GATED] if not p["spec"].get("schedulingGates")]
    if ungated or len(held[GATED]) != plan.gated:
        errors.append(f"{len(held[GATED])} gated pods of {plan.gated}, {len(ungated)} of them without their gate")
    init = plan.nodes * plan.init_per_node  # preemption victims go, the rest stay
    extra = sum(len(v) for v in held.values())
    if not len(names) <= len(by_name) - extra <= len(names) + init:
        errors.append(f"{len(by_name)} pods in the namespace, {len(names)} created (and {init} bound up front, "
                      f"{extra} held unbound)")
    moved = [n for n in names if n in by_name and watch.node.get(n) != by_name[n]["spec"].get("nodeName")]
    if watch.rebound or moved:
        errors.append(f"pods whose node changed: {(watch.rebound + moved)[:5]}")
    if not ceiling:
        errors += plan.workload.violations(pods, nodes)[:20]
    scheduled = Counter((e.get("regarding") or {}).get("name") for e in events)
    twice = [n for n, c in scheduled.items() if c > 1]
    if twice:
        errors.append(f"{len(twice)} pods with more than one Scheduled event, e.g. {twice[:5]}")
    found = log_findings(which, proc.log)
    if found["bind_conflicts"]:
        errors.append(f"{found['bind_conflicts']} bindings refused with 409 (a pod was bound twice)")
    if shadow is not None and (shadow["phase"] != "Shadowing" or shadow["compared"] != shadow["expected"]):
        errors.append(f"status.rollout: phase {shadow['phase']}, shadow compared {shadow['compared']} decisions, "
                      f"expected {shadow['expected']} ({shadow['pods']} pods + {shadow['failed_attempts']} failed "
                      f"attempts; the scheduler's own count: {shadow['metric_compared']})")
    if errors:
        raise BenchError(f"{LABEL[which]} on {plan.workload.name}: " + "; ".join(errors))
    attempts = {r: metric_sum(metrics, proc.metric, result=r) if proc.metric else None
                for r in ("scheduled", "unschedulable")}
    # the condition a scheduler writes on a pod it found no node for (PodScheduled False, Unschedulable)
    marked = sum(1 for p in held[UNSCHEDULABLE] if any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (p.get("status") or {}).get("conditions") or []))
    extra_checks = {"gated_unbound": len(held[GATED])} if plan.gated else {}
    if plan.workload.churn:
        extra_checks.update(unschedulable_unbound=sum(1 for p in held[UNSCHEDULABLE] if not p["spec"].get("nodeName")),
                            unschedulable_marked=marked)
    return {**extra_checks,
            "bound": len(names) - len(unbound), "created": len(names), "scheduled_events": sum(scheduled.values()),
            "scheduled_attempts": attempts["scheduled"], "unschedulable_attempts": attempts["unschedulable"],
            "log_warnings_or_errors": found["warnings_or_errors"], "log_first": found["first"],
            "bind_conflicts": found["bind_conflicts"]}


def run_one(which: str, plan: RunPlan, a: argparse.Namespace) -> dict:
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    cluster = localcluster.LocalCluster(run_dir / "cluster", kubeconfig_path=run_dir / "kubeconfig")
    progress(f"{plan.workload.name} / {LABEL[which]}: fresh control plane, {plan.nodes} nodes")
    gates = ({"feature_gates": localcluster.GANG_FEATURE_GATES, "runtime_config": localcluster.GANG_RUNTIME_CONFIG}
             if plan.workload.gangs else {})  # every scheduler of the workload runs on the same control plane
    cluster.up(kwok=a.kwok, quiet=True, **gates)
    try:
        if plan.workload.dra:  # the claims of the pods' templates, for every scheduler alike
            start_claim_controller(cluster, a)
            return asyncio.run(measure_dra(which, plan, cluster, a))
        return asyncio.run(measure(which, plan, cluster, a))
    except BenchError as e:
        raise BenchError(f"{e}\n(logs in {run_dir})") from None
    finally:
        cluster.down(quiet=True)
        shutil.rmtree(cluster.state_dir / "etcd", ignore_errors=True)


# ------------------------------------------------------------------------------------ the binder
async def binder_main(a: argparse.Namespace) -> None:
    """The ceiling: bind every pending pod of our scheduler name round-robin over the nodes, with
    no decision, ``concurrency`` bindings in flight, through the same client as the operator;
    then post its Scheduled event (events.k8s.io/v1, as both schedulers do), since a pod counts
    as scheduled only with both. With ``--dra`` a pod with claims is taken once its status names
    them all (the resourceclaim controller's work), goes to the next node round-robin with free
    devices (the ResourceSlices' devices no claim holds), and each of its claims gets one of them
    written as kube-scheduler's PreBind writes it: the finalizer with an Update, then
    status.allocation and reservedFor with an UpdateStatus; then the binding and the event."""
    client = KubeClient(load_credentials(a.kubeconfig), qps=a.qps, burst=a.burst, user_agent="bench-binder")
    nodes = sorted(n["metadata"]["name"] for n in await list_all(client, "/api/v1/nodes"))
    free: dict[str, list[tuple[str, str]]] = {}  # node -> its free (pool, device), the last one taken first
    claims: dict[tuple[str, str], dict] = {}  # the latest claims seen, by (namespace, name)
    if a.dra:
        taken = {(r.get("pool"), r.get("device"))
                 for c in await list_all(client, f"/apis/{dra.API}/resourceclaims")
                 for r in ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                           or [])}
        for sl in await list_all(client, f"/apis/{dra.API}/resourceslices"):
            spec = sl.get("spec") or {}
            pool = (spec.get("pool") or {}).get("name")
            if spec.get("driver") == dra.DRIVER and spec.get("nodeName"):
                free.setdefault(spec["nodeName"], []).extend(
                    (pool, d["name"]) for d in reversed(spec.get("devices") or []) if (pool, d["name"]) not in taken)
    queue: asyncio.Queue = asyncio.Queue()
    seen: set[tuple[str, str]] = set()
    counts = Counter()
    rr = itertools.count()

    def on_pod(kind: str, obj: dict) -> None:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if kind == "DELETED" or spec.get("schedulerName") != SCHEDULER_NAME[CEILING] or spec.get("nodeName") \
                or key in seen or spec.get("schedulingGates") \
                or (meta.get("labels") or {}).get(ROLE) == UNSCHEDULABLE:  # it knows they fit nowhere
            return
        claim_names = dra.pod_claim_names(obj) if a.dra else []
        if claim_names is None:
            return  # its claims are not all made yet: a later update names them
        seen.add(key)
        queue.put_nowait((key, meta.get("uid"), claim_names))

    def on_claim(kind: str, obj: dict) -> None:
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if kind == "DELETED":
            claims.pop(key, None)
        else:
            claims[key] = obj

    def pick(k: int) -> str | None:
        """The next node round-robin (with ``k`` free devices for a pod with ``k`` claims)."""
        for _ in range(len(nodes)):
            node = nodes[next(rr) % len(nodes)]
            if not k or len(free.get(node, ())) >= k:
                return node
        return None

    async def allocate(ns: str, claim: str, node: str, pod: str, uid: str) -> None:
        pool, dev = free[node].pop()
        path = f"/apis/{dra.API}/namespaces/{ns}/resourceclaims/{claim}"
        c = claims.get((ns, claim)) or await client.get(path)
        for _ in range(10):
            try:
                if dra.DELETE_PROTECTION not in (c["metadata"].get("finalizers") or []):
                    c = copy.deepcopy(c)
                    c["metadata"]["finalizers"] = [*(c["metadata"].get("finalizers") or []), dra.DELETE_PROTECTION]
                    c = await client.request("PUT", path, c)
                ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                c = {**c, "status": {**(c.get("status") or {}), "allocation": dra.allocation(node, pool, dev, ts),
                                     "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}}
                await client.request("PUT", path + "/status", c)
                return
            except ApiError as e:
                if e.status != 409:
                    raise
                counts["claim_conflicts"] += 1  # a stale copy: read it again
                c = await client.get(path)
        raise BenchError(f"claim {ns}/{claim}: conflicts on every try")

    async def worker() -> None:
        while True:
            (ns, name), uid, claim_names = await queue.get()
            node = pick(len(claim_names))
            if node is None:
                counts["errors"] += 1
                print(f"bind error {ns}/{name}: no node has {len(claim_names)} free devices", flush=True)
                continue
            try:
                for cname in claim_names:
                    await allocate(ns, cname, node, name, uid)
                await client.bind(ns, name, node, uid=uid)
                counts["bound"] += 1
                now = time.time()
                await client.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", {
                    "apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
                    "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z",
                    "reportingController": SCHEDULER_NAME[CEILING], "reportingInstance": SCHEDULER_NAME[CEILING],
                    "action": "Binding", "reason": "Scheduled", "type": "Normal",
                    "note": f"Successfully assigned {ns}/{name} to {node}",
                    "regarding": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns, "uid": uid}})
            except (ApiError, BenchError) as e:
                counts["conflicts" if isinstance(e, ApiError) and e.status == 409 else "errors"] += 1
                print(f"bind error {ns}/{name}: {e}", flush=True)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                counts["errors"] += 1
                print(f"bind error {ns}/{name}: {e}; retrying", flush=True)
                await asyncio.sleep(0.5)
                queue.put_nowait(((ns, name), uid, claim_names))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(Informer(client, "/api/v1/pods", on_pod, "pods").run()),
             *(asyncio.create_task(worker()) for _ in range(a.concurrency))]
    if a.dra:
        tasks.append(asyncio.create_task(Informer(client, f"/apis/{dra.API}/resourceclaims", on_claim, "claims").run()))
    await stop.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.close()
    print(json.dumps({"bound": counts["bound"], "conflicts": counts["conflicts"], "errors": counts["errors"],
                      "claim_conflicts": counts["claim_conflicts"]}), flush=True)


# ------------------------------------------------------------------------------------ report
def ratio(x: float | None, y: float | None) -> float | None:
    return round(x / y, 3) if x and y else None


def median_run(runs: list[dict]) -> dict:
    """The run with the median pods/s (the lower one of an even count), with every run's pods/s."""
    ordered = sorted(runs, key=lambda r: r["pods_per_s"])
    out = {**ordered[(len(ordered) - 1) // 2], "pods_per_s_repeats": [r["pods_per_s"] for r in runs]}
    if "last_group_whole_s" in runs[0]:
        out["last_group_whole_s_repeats"] = [r["last_group_whole_s"] for r in runs]
    return out


def print_table(name: str, wl_result: dict, cores: int) -> None:
    runs = wl_result["runs"]
    lat = next((r["latency"] for r in runs.values() if "latency" in r), None)
    common = next((r["latency_common"] for r in runs.values() if "latency_common" in r), None)
    print(f"\n{name}: {wl_result['nodes']} nodes, {wl_result['pods']} pods measured"
          + (f" ({wl_result['init_pods']} more bound up front)" if wl_result.get("init_pods") else "")
          + (f", then twice {lat['pods']} pods for latency ({wl_result['latency_load']} x each scheduler's own "
             f"pods/s" + (f", then {common['rate']} pods/s for all)" if common else ")") if lat else "")
          + f"; {cores} cores" + (f"; median of {wl_result['repeat']} runs" if wl_result["repeat"] > 1 else ""))
    head = (f"{'scheduler':<30} {'pods/s':>7} {'avg':>6} {'start s':>7} {'last ev s':>9} {'p99 own':>8} {'p99 common':>10} "
            f"{'ms/pod':>6} {'run ms/pod':>10} {'api+etcd s':>10} {'other':>5} {'RSS MB':>6} {'decide ms':>9}")
    print(head)
    print("-" * len(head))
    for which in (CEILING, KUBE_MIN, KUBE, KUBE_SAME, *OURS_ALL):
        r = runs.get(which)
        if r is None:
            continue
        la, lc = r.get("latency") or {}, r.get("latency_common") or {}
        p99 = f"{la['p99_ms']:.1f}" + ("*" if la.get("saturated") else "") if la else "-"
        p99c = f"{lc['p99_ms']:.1f}" + ("*" if lc.get("saturated") else "") if lc else "-"
        dec = r.get("decision") or {}
        print(f"{LABEL[which]:<30} {r['pods_per_s']:>7.1f} {r['pods_per_s_overall']:>6.1f} {r['startup_s']:>7.2f} {r['last_event_s']:>9.2f} "
              f"{p99:>8} {p99c:>10} {r['cpu_ms_per_pod']:>6.2f} {r['cpu_ms_per_pod_run']:>10.2f} "
              f"{r['apiserver_cpu_s_run'] + r['etcd_cpu_s_run']:>10.1f} "
              f"{r['other_cores_in_window']:>5.2f} {r['peak_rss_mb']:>6.0f} "
              f"{dec['mean_ms'] if dec else '-':>9}")
    for which, why in (wl_result.get("skipped") or {}).items():
        print(f"{LABEL[which]:<30} left out: {why}")
    rat = {k: "-" if v is None else v for k, v in wl_result["ratios"].items()}
    if OURS_NO_HINTS in runs:
        print(f"suggestions on / off, pods/s: {rat['suggestions_on_vs_off']} (10-90%), "
              f"{rat['suggestions_on_vs_off_avg']} (whole run); {wl_result.get('unplaceable_pods', 0)} pods "
              "that fit no node pending")
    tun = (runs.get(OURS_TUNING) or {}).get("tuning")
    if tun is not None:
        done, first = tun.get("evaluations") or 0, tun.get("first") or {}
        print(f"tuning on / off, pods/s: {rat['tuning_vs_ours']}; tuner evaluations finished by the end of the "
              f"throughput phase: {done}; the first: {first.get('windowPods')} pods, {first.get('replays')} replays "
              f"in {first.get('seconds')} s, {first.get('yieldedSeconds')} s of it waiting for the scheduler")
    for which in SHADOWS:
        r, ours = runs.get(which), runs.get(OURS) or {}
        if r is None:
            continue
        sh, tag = r["shadow"], "shadow" if which == OURS_SHADOW else "shadow full"
        x = wl_result["ratios"][f"{OPTIONAL[which]}_vs_ours"]
        way = ("the candidate: other weights, the stable cycle's scores reweighted" if which == OURS_SHADOW else
               f"the candidate: NodeResourcesFit {SHADOW_FULL_STRATEGY}, a cycle of its own per pod")
        movers = ", ".join(f"{n} {k}" for n, k in (sh.get("plugins") or {}).items())
        others = (r["other_cores_in_window"], ours.get("other_cores_in_window", 0.0))
        print(f"{tag} cost: ours({tag}) pods/s / ours pods/s = " + (f"{x} ({100 * (x - 1):+.1f}%)" if x else "-")
              + f"; CPU ms/pod in the window {r['cpu_ms_per_pod']} / {ours.get('cpu_ms_per_pod', '-')} "
              f"= {wl_result['ratios'][f'{OPTIONAL[which]}_cpu_per_pod_vs_ours'] or '-'}"
              + (f" (noisy: other processes used {others[0]:.2f} / {others[1]:.2f} cores in the windows)"
                 if max(others) > 0.2 else ""))
        print(f"  {way}; status.rollout {sh['phase']}: compared {sh['compared']} (expected {sh['expected']}: "
              f"{sh['pods']} pods + {sh['failed_attempts']} failed attempts), changed {sh['changed']}"
              + (f" (moved by {movers})" if movers else ""))
    print(f"ratios of pods/s: policy-scheduler / kube-scheduler (same plugins) = {rat['ours_vs_kube']}, "
          f"/ kube-scheduler (default profile) = {rat['ours_vs_kube_full']}, / bare binder = {rat['ours_vs_ceiling']}; "
          f"avg / kube-scheduler (same plugins) = {rat.get('ours_vs_kube_avg', '-')}"
          + (f"; / minimal kube-scheduler = {rat['ours_vs_kube_minimal']} (avg {rat['ours_vs_kube_minimal_avg']}), "
             f"bare binder / minimal kube-scheduler = {rat['ceiling_vs_kube_minimal']}" if KUBE_MIN in runs else ""))
    print("pods/s: between the 10% and the 90% pod scheduled (bound, and its Scheduled event posted); avg: pods "
          "over the time from the scheduler's start to the last pod (scheduler_perf's average); start s: "
          "process start to the first; last ev s: to the last Scheduled event; p99 own / common: creation to "
          "scheduled at a share of the scheduler's own pods/s / at the common rate; ms/pod: the scheduler's CPU in "
          "the 10..90% window; run ms/pod: its CPU from its start to the last pod, per pod; api+etcd s: their CPU "
          "seconds over that run; other: cores the rest of the machine used in the window; RSS: the scheduler's "
          "peak; decide ms: PreFilter to Score per attempt (scheduler_framework_extension_point_duration_seconds), "
          "in the throughput phase")
    if any((r.get(k) or {}).get("saturated") for r in runs.values() for k in ("latency", "latency_common")):
        print("* saturated: scheduled less than 90% of the offered rate")
    busy = [f"{LABEL[w]} {r['other_cores_in_window']:.2f}" for w, r in runs.items()
            if r["other_cores_in_window"] > 0.2]
    if busy:
        print(f"note: other processes used cores during the measured window ({', '.join(busy)}); "
              "these figures are noisier than on a quiet machine")
    whole = {w: r["last_group_whole_s"] for w, r in runs.items() if "last_group_whole_s" in r}
    if whole:
        rat_g = wl_result["ratios"]
        print("last group whole (its last member scheduled), seconds after the scheduler's start: "
              + "; ".join(f"{LABEL[w]} {v}" for w, v in whole.items())
              + (f"; kube-scheduler / policy-scheduler (time) = {rat_g['ours_vs_kube_last_group']}"
                 if rat_g.get("ours_vs_kube_last_group") else ""))
        print("group latency, avg over the groups, s (from the group's last member created, or the scheduler's "
              "start if later, to the group whole; every pod here exists before the start) / the same from the "
              "first pod scheduled: " + "; ".join(
                  f"{LABEL[w]} {r['group_latency_s']} / {r['group_latency_after_startup_s']}"
                  for w, r in runs.items() if "group_latency_s" in r)
              + f"; policy-scheduler / kube-scheduler (same plugins) = "
              f"{rat_g.get('ours_vs_kube_group_latency') or '-'} / "
              f"{rat_g.get('ours_vs_kube_group_latency_after_startup') or '-'} (goal <= 0.5); "
              f"last group whole, policy-scheduler / kube-scheduler (same plugins) = "
              f"{rat_g.get('ours_vs_kube_same_last_group_time') or '-'}")
        print("group attempt latency (scheduler_podgroup_scheduling_attempt_duration_seconds, mean over the "
              "throughput phase's pod-group attempts; algorithm alone in brackets), ms: " + "; ".join(
                  f"{LABEL[w]} {g.get('mean_ms', '-')} ({g.get('algorithm_mean_ms', '-')}) x{g.get('attempts', 0)}"
                  for w, r in runs.items() if (g := r.get("group_attempt")) is not None)
              + f"; policy-scheduler / kube-scheduler (same plugins) = "
              f"{rat_g.get('ours_vs_kube_group_attempt') or '-'} (goal <= 0.5)")
    if wl_result["repeat"] > 1:
        print("pods/s of every run: " + "; ".join(f"{LABEL[w]} {r['pods_per_s_repeats']}" for w, r in runs.items()))
        if whole:
            print("last group whole of every run: " + "; ".join(
                f"{LABEL[w]} {r['last_group_whole_s_repeats']}" for w, r in runs.items()))
    for which, r in runs.items():
        c = r["checks"]
        held = "".join(f"; {c[k]} {what}" for k, what in (
            ("gated_unbound", "gated pods left unbound"),
            ("unschedulable_unbound", "unschedulable pods left unbound"),
            ("unschedulable_marked", "of them marked PodScheduled=False/Unschedulable")) if k in c)
        print(f"  {LABEL[which]}: {c['bound']}/{c['created']} pods bound, none twice; Scheduled events "
              f"{c['scheduled_events']}; 'scheduled' attempts {c['scheduled_attempts']}, 'unschedulable' "
              f"{c.get('unschedulable_attempts')}{held}; log warnings/errors {c['log_warnings_or_errors']}"
              + (f"; churn {r['churn']}" if r.get("churn") else ""))
        for line in c["log_first"][:3] if which not in KUBES else ():  # kube's: start-up noise here
            print(f"      {line[:200]}")


def print_dra_table(name: str, wl_result: dict, cores: int) -> None:
    runs = wl_result["runs"]
    print(f"\n{name}: {wl_result['nodes']} nodes x {wl_result['devices_per_node']} devices ({dra.DRIVER}), "
          f"{wl_result['init_pods']} pods scheduled first (not measured), then {wl_result['pods']} pods measured, "
          f"posted with the scheduler running; one claim per pod from {dra.CLAIM_TEMPLATE}; {cores} cores"
          + (f"; median of {wl_result['repeat']} runs" if wl_result["repeat"] > 1 else ""))
    head = (f"{'scheduler':<30} {'pods/s':>7} {'to ev':>6} {'10-90%':>6} {'post s':>6} {'claim s':>7} "
            f"{'bound s':>7} {'claim p50/p99':>13} {'bind p50/p99':>13} {'ms/pod':>6} {'api+etcd s':>10} "
            f"{'kcm s':>5} {'other':>5} {'RSS MB':>6} {'decide ms':>9}")
    print(head)
    print("-" * len(head))

    def pq(q: dict) -> str:
        return f"{q['p50_ms']:.0f}/{q['p99_ms']:.0f}" if q else "-"

    for which in (CEILING, KUBE_MIN, KUBE, KUBE_SAME, *OURS_ALL):
        r = runs.get(which)
        if r is None:
            continue
        dec = r.get("decision") or {}
        print(f"{LABEL[which]:<30} {r['pods_per_s']:>7.1f} {r['pods_per_s_overall']:>6.1f} "
              f"{r['pods_per_s_window']:>6.1f} {r['post_s']:>6.2f} {r['last_claim_s'] or 0:>7.2f} "
              f"{r['last_bound_s']:>7.2f} {pq(r['claim_after_create']):>13} {pq(r['bound_after_claim']):>13} "
              f"{r['cpu_ms_per_pod']:>6.2f} {r['apiserver_cpu_s'] + r['etcd_cpu_s']:>10.1f} "
              f"{r['controller_cpu_s']:>5.1f} {r['other_cores_in_window']:>5.2f} {r['peak_rss_mb']:>6.0f} "
              f"{dec.get('mean_ms', '-'):>9}")
    for which, why in (wl_result.get("skipped") or {}).items():
        print(f"{LABEL[which]:<30} left out: {why}")
    rat = {k: "-" if v is None else v for k, v in wl_result["ratios"].items()}
    print(f"ratios of pods/s: policy-scheduler / kube-scheduler (default profile) = {rat['ours_vs_kube_full']}, "
          f"/ kube-scheduler (same plugins) = {rat['ours_vs_kube']}, / bare binder = {rat['ours_vs_ceiling']}; "
          f"kube-scheduler / bare binder = {rat['kube_vs_ceiling']}")
    print("pods/s: measured pods over the time from the first create to the last bound (the claims' creation "
          "by kube-controller-manager's resourceclaim controller included); to ev: to the last Scheduled event; "
          "10-90%: between the 10% and the 90% pod scheduled; post s: the time to post them all; claim s: to the "
          "last claim named in a pod's status; bound s: to the last bound; claim p50/p99: ms from a pod's creation "
          "to its claim named; bind p50/p99: ms from then to its binding; ms/pod: the scheduler's CPU from the "
          "first create to the last bound, per pod; api+etcd s, kcm s: their CPU seconds then; other: cores the "
          "rest of the machine used; decide ms: PreFilter to Score per attempt of the measured pods")
    busy = [f"{LABEL[w]} {r['other_cores_in_window']:.2f}" for w, r in runs.items()
            if r["other_cores_in_window"] > 0.2]
    if busy:
        print(f"note: other processes used cores during the measured window ({', '.join(busy)}); "
              "these figures are noisier than on a quiet machine")
    if wl_result["repeat"] > 1:
        print("pods/s of every run: " + "; ".join(f"{LABEL[w]} {r['pods_per_s_repeats']}" for w, r in runs.items()))
    for which, r in runs.items():
        c = r["checks"]
        print(f"  {LABEL[which]}: {c['bound']}/{c['created']} pods bound, none twice; Scheduled events "
              f"{c['scheduled_events']}; {c['claims_allocated']}/{c['claims']} claims allocated, "
              f"{c['devices_allocated']} devices, none twice, each reserved for its pod alone; 'scheduled' "
              f"attempts {c['scheduled_attempts']}, 'unschedulable' {c['unschedulable_attempts']}; log "
              f"warnings/errors {c['log_warnings_or_errors']}; cleanup {c['cleanup_s']}s")
        for line in c["log_first"][:3] if which not in KUBES else ():
            print(f"      {line[:200]}")


def compile_operator() -> None:
    """policy-scheduler's bytecode, compiled ahead as installing the package compiles it (the
    image's pip install): with PYTHONDONTWRITEBYTECODE set (as the image sets it, and this shell
    may) every start would compile each module from source again, about 0.1 s of its start-up."""
    import compileall

    compileall.compile_dir(str(ROOT / "operator" / "policy_scheduler"), quiet=1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["binder"]:
        b = argparse.ArgumentParser(prog="throughput.py binder")
        b.add_argument("--kubeconfig", required=True)
        b.add_argument("--qps", type=float, default=5000)
        b.add_argument("--burst", type=int, default=10000)
        b.add_argument("--concurrency", type=int, default=64)
        b.add_argument("--dra", action="store_true", help="allocate a free device to each claim of a pod first")
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(binder_main(b.parse_args(argv[1:])))
        return 0

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", action="append", default=[], metavar="NAME[,NAME...]",
                    help="repeatable, or comma-separated: " + ", ".join([*WORKLOADS, "all"]) + "; default: "
                         + ", ".join(MAIN_WORKLOADS) + " (with --quick: SchedulingBasic); all: every workload, "
                         "in this order")
    ap.add_argument("--quick", action="store_true", help="small sizes: under a minute per workload")
    ap.add_argument("--nodes", type=int, help="nodes (default: the workload's size)")
    ap.add_argument("--pods", type=int, help="pods measured for throughput (default: the workload's size)")
    ap.add_argument("--schedulers", nargs="+", choices=[s for s in SCHEDULERS if s not in OPTIONAL],
                    default=[s for s in SCHEDULERS if s not in OPTIONAL],
                    help="--tuning, --shadow and --shadow-full add their variant of policy-scheduler to these")
    ap.add_argument("--qps", type=float, default=5000, help="client QPS of every scheduler")
    ap.add_argument("--burst", type=int, default=10000, help="client burst of every scheduler")
    ap.add_argument("--bind-concurrency", type=int, default=64,
                    help="bindings in flight (policy-scheduler and the binder)")
    ap.add_argument("--latency-pods", type=int,
                    help="pods of the latency phase (default 1000, quick 300, at most --pods; 0: none)")
    ap.add_argument("--latency-rate", type=float, default=100,
                    help="pods/s of the second latency phase, the same for every scheduler (default 100; 0: none)")
    ap.add_argument("--latency-load", type=float, default=0.25,
                    help="first latency phase: this share of each scheduler's own measured pods/s (default 0.25)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per scheduler, interleaved; the run with the median pods/s is reported")
    ap.add_argument("--create-concurrency", type=int, default=64, help="pod creations in flight")
    ap.add_argument("--stall-timeout", type=float, default=60, help="fail when no pod is bound for this long")
    ap.add_argument("--kwok", action="store_true", help="kwok-managed nodes (kwok also updates pod status)")
    ap.add_argument("--tuning", action="store_true",
                    help="also run policy-scheduler with spec.tuning on in the default policy (Recommend, every "
                         "3 s over the last 500 pods): the tuner's cost in pods/s, same run")
    ap.add_argument("--shadow", action="store_true",
                    help="also run policy-scheduler with a Shadow rollout in the default policy, whose candidate "
                         "has other weights (the shared way): the shadow's cost in pods/s, same run")
    ap.add_argument("--shadow-full", action="store_true",
                    help="also run policy-scheduler with a Shadow rollout whose candidate's NodeResourcesFit "
                         f"scores {SHADOW_FULL_STRATEGY} (a cycle of its own per pod): that cost too")
    ap.add_argument("--no-suggestions", action="store_true",
                    help="also run policy-scheduler with --suggestions=off: what the searches for pending pods "
                         "cost in pods/s, same run (with --unplaceable 2000: their cost with 2,000 pods pending)")
    ap.add_argument("--unplaceable", type=int, default=0,
                    help="pods that fit no node (1000 cpu), created before the measured pods and left pending, "
                         "for every scheduler")
    ap.add_argument("--operator-arg", action="append", default=[],
                    help="extra argument for `policy-scheduler run` (repeatable), "
                         "e.g. --operator-arg=--log-level=warning")
    ap.add_argument("--dra-devices", type=int, default=dra.DEVICES,
                    help=f"DRA: devices per node, in its ResourceSlice (default {dra.DEVICES})")
    ap.add_argument("--dra-init", type=int,
                    help="DRA: pods scheduled before the measured ones, not measured (default: half the devices; "
                         "at least 1)")
    ap.add_argument("--out", type=Path, help="run directory (default .local/bench-<time>)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        asked = workload_names(a.workload)
    except ValueError as e:
        ap.error(str(e))

    default = ["SchedulingBasic"] if a.quick else list(MAIN_WORKLOADS)
    names = asked or default
    order = [s for s in SCHEDULERS if s in a.schedulers or (s in OPTIONAL and getattr(a, OPTIONAL[s]))]
    out = a.out or ROOT / ".local" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    cores = os.cpu_count() or 1
    latency_pods = a.latency_pods if a.latency_pods is not None else (300 if a.quick else 1000)
    result: dict[str, Any] = {
        "ok": False, "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": {"cores": cores, "loadavg_at_start": round(os.getloadavg()[0], 2),
                    "loadavg_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()]},
        "config": {"qps": a.qps, "burst": a.burst, "bind_concurrency": a.bind_concurrency, "kwok": a.kwok,
                   "quick": a.quick, "schedulers": order, "run_dir": str(out),
                   **({"shadow_rollout": {OPTIONAL[s]: shadow_rollout(s) for s in SHADOWS if s in order}}
                      if any(s in order for s in SHADOWS) else {}),
                   "method": "throughput: pods created first, scheduler started, pods/s between the 10% and 90% "
                             "pod scheduled (bound and its Scheduled event seen); latency: more pods created at a "
                             "steady rate (a share of each scheduler's own pods/s, then a common rate), creation "
                             "to scheduled as watched"},
        "workloads": {},
    }
    progress(f"run directory {out}; {cores} cores, load average {result['machine']['loadavg_at_start']}")
    compile_operator()
    code = 0
    failed: list[str] = []
    try:
        for name in names:
            reps: dict[str, list[dict]] = defaultdict(list)
            try:
                wl = WORKLOADS[name]
                n = a.nodes or (wl.quick_nodes if a.quick else wl.nodes)
                m = a.pods or (wl.quick_pods if a.quick else wl.pods)
                init = wl.quick_init_per_node if a.quick and wl.quick_init_per_node is not None else wl.init_per_node
                if wl.name == "ExtendedResource" and m > n:  # pod i asks for node i's resource, of which it has 1
                    if a.pods:
                        raise BenchError(f"{name}: at most one pod per node (--pods {m} > {n} nodes)")
                    m = n
                no_latency = wl.preempts or wl.gangs or wl.init_per_node or wl.dra or not wl.latency
                plan = RunPlan(wl, n, m, 0 if no_latency else min(latency_pods, m), init, out,
                               gated=wl.quick_gated if a.quick else wl.gated, unplaceable=a.unplaceable)
                wl_order, skipped = order, {}
                if wl.dra:
                    try:
                        plan.pods, plan.dra_init = dra.sizes(n, a.dra_devices, a.pods, a.dra_init)
                    except ValueError as e:
                        raise BenchError(f"{name}: {e}") from None
                    plan.dra_devices, m = a.dra_devices, plan.pods
                    if not policy_has("DynamicResources"):  # neither would allocate a device
                        why = "the default policy has no DynamicResources (policies/default.yaml)"
                        skipped = {w: why for w in order if w in (*OURS_ALL, KUBE_SAME)}
                    if KUBE_MIN in order:  # it would bind the pods without their devices
                        skipped[KUBE_MIN] = "the minimal profile has no DynamicResources: it allocates no device"
                if KUBE_MIN in order and name in MINIMAL_LEFT_OUT:
                    skipped[KUBE_MIN] = MINIMAL_LEFT_OUT[name]
                wl_order = [w for w in order if w not in skipped]
                for w, why in skipped.items():
                    progress(f"{name}: {LABEL[w]} left out: {why}")
                for rep in range(a.repeat):  # interleaved, so slow drifts of the machine hit all alike
                    for which in wl_order:
                        plan.run_dir = out / (f"{name}-{which}" + (f"-{rep + 1}" if a.repeat > 1 else ""))
                        reps[which].append(run_one(which, plan, a))
                runs = {which: median_run(rs) for which, rs in reps.items()}
                wr = {"nodes": n, "pods": m, "init_pods": n * init, "latency_load": a.latency_load,
                      "latency_rate": a.latency_rate, "repeat": a.repeat, "runs": runs,
                      "description": WORKLOAD_NOTES.get(name, "")}
                if plan.gated:
                    wr["gated_pods"] = plan.gated
                if plan.unplaceable:
                    wr["unplaceable_pods"] = plan.unplaceable
                if wl.churn:
                    wr["churn"] = {"mode": wl.churn, "interval_s": CHURN_INTERVAL[wl.churn]}
                if skipped:
                    wr["skipped"] = skipped
                if wl.dra:
                    wr.update(init_pods=plan.dra_init, devices_per_node=plan.dra_devices, skipped=skipped,
                              method="pods posted with the scheduler running, after the first init_pods were "
                                     "scheduled; pods/s: measured pods over the time from the first create to the "
                                     "last bound")
                pps = {k: v["pods_per_s"] for k, v in runs.items()}
                avg = {k: v["pods_per_s_overall"] for k, v in runs.items()}
                cpu = {k: v["cpu_ms_per_pod"] for k, v in runs.items()}
                cpu_run = {k: v.get("cpu_ms_per_pod_run") for k, v in runs.items()}
                wr["ratios"] = {"ours_vs_kube": ratio(pps.get(OURS), pps.get(KUBE_SAME)),  # like for like
                                "ours_vs_kube_full": ratio(pps.get(OURS), pps.get(KUBE)),
                                "ours_vs_ceiling": ratio(pps.get(OURS), pps.get(CEILING)),
                                "kube_vs_ceiling": ratio(pps.get(KUBE), pps.get(CEILING)),
                                "kube_same_vs_ceiling": ratio(pps.get(KUBE_SAME), pps.get(CEILING)),
                                # the second ceiling: kube-scheduler's minimal profile (client-go)
                                "ours_vs_kube_minimal": ratio(pps.get(OURS), pps.get(KUBE_MIN)),
                                "ours_vs_kube_minimal_avg": ratio(avg.get(OURS), avg.get(KUBE_MIN)),
                                "ceiling_vs_kube_minimal": ratio(pps.get(CEILING), pps.get(KUBE_MIN)),
                                "tuning_vs_ours": ratio(pps.get(OURS_TUNING), pps.get(OURS)),
                                # --no-suggestions: on / off, in the window and over the whole run
                                "suggestions_on_vs_off": ratio(pps.get(OURS), pps.get(OURS_NO_HINTS)),
                                "suggestions_on_vs_off_avg": ratio(avg.get(OURS), avg.get(OURS_NO_HINTS)),
                                # --shadow, --shadow-full: pods/s, and the scheduler's CPU per pod in the window
                                "shadow_vs_ours": ratio(pps.get(OURS_SHADOW), pps.get(OURS)),
                                "shadow_cpu_per_pod_vs_ours": ratio(cpu.get(OURS_SHADOW), cpu.get(OURS)),
                                "shadow_full_vs_ours": ratio(pps.get(OURS_SHADOW_FULL), pps.get(OURS)),
                                "shadow_full_cpu_per_pod_vs_ours": ratio(cpu.get(OURS_SHADOW_FULL), cpu.get(OURS)),
                                # scheduler_perf's own figure: pods over the whole run
                                "ours_vs_kube_avg": ratio(avg.get(OURS), avg.get(KUBE_SAME)),
                                # CPU per pod from start to last pod (the goal: at most 0.5)
                                "cpu_run_ours_vs_kube": ratio(cpu_run.get(OURS), cpu_run.get(KUBE_SAME))}
                if wl.gangs:  # kube-scheduler's time over ours: above 1, ours made the last group whole sooner
                    lg = {k: v.get("last_group_whole_s") for k, v in runs.items()}
                    wr["ratios"]["ours_vs_kube_last_group"] = ratio(lg.get(KUBE_SAME) or lg.get(KUBE), lg.get(OURS))
                    # ours over kube-scheduler (same plugins, else its default profile): below 1, ours was quicker
                    kube_g = runs.get(KUBE_SAME) or runs.get(KUBE) or {}
                    ours_g = runs.get(OURS) or {}
                    wr["ratios"]["ours_vs_kube_same_last_group_time"] = ratio(lg.get(OURS),
                                                                              kube_g.get("last_group_whole_s"))
                    for key in ("group_latency", "group_latency_after_startup"):
                        wr["ratios"][f"ours_vs_kube_{key}"] = ratio(ours_g.get(f"{key}_s"), kube_g.get(f"{key}_s"))
                    # the pod-group scheduling attempt, as both measure it (upstream's metric): below 1, ours is quicker
                    wr["ratios"]["ours_vs_kube_group_attempt"] = ratio(
                        (ours_g.get("group_attempt") or {}).get("mean_ms"),
                        (kube_g.get("group_attempt") or {}).get("mean_ms"))
                result["workloads"][name] = wr
                (print_dra_table if wl.dra else print_table)(name, wr, cores)
            except (BenchError, localcluster.ClusterError, ApiError) as e:
                # one workload failed: said in its place, and the others still run (ok stays false)
                print(f"\nFAILED: {name}: {e}", file=sys.stderr, flush=True)
                result["workloads"][name] = {"error": str(e), "description": WORKLOAD_NOTES.get(name, ""),
                                             # what the schedulers that finished measured
                                             "runs": {w: median_run(rs) for w, rs in reps.items() if rs}}
                failed.append(name)
            save(result, out)  # after every workload: a long run keeps what it measured
        if failed:
            raise BenchError("failed: " + ", ".join(failed))
        result["ok"] = True
    except (BenchError, localcluster.ClusterError, ApiError) as e:
        print(f"\nFAILED: {e}", file=sys.stderr, flush=True)
        result["error"] = str(e)
        code = 1
    except KeyboardInterrupt:
        result["error"] = "interrupted"
        code = 130
    line = save(result, out, final=True)
    print(line, flush=True)
    return code


def save(result: dict, out: Path, final: bool = False) -> str:
    """result.json in the run directory (rewritten as the run goes: ``written``, and ``finished``
    at the end); its one line returned."""
    result["written"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if final:
        result["finished"] = result["written"]
    result["machine"]["loadavg_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    line = json.dumps(result, separators=(",", ":"))
    if out.is_dir():
        (out / "result.json").write_text(line + "\n")
    return line


def workload_names(asked: list[str]) -> list[str]:
    """--workload values (repeated, comma-separated, or ``all``) as workload names in order, once each."""
    names = [x.strip() for v in asked for x in v.split(",") if x.strip()]
    unknown = [x for x in names if x != "all" and x not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload {', '.join(unknown)} (choose from {', '.join([*WORKLOADS, 'all'])})")
    return list(WORKLOADS) if "all" in names else list(dict.fromkeys(names))


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


if __name__ == "__main__":
    sys.exit(main())
