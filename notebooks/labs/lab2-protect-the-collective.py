# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: labkit (Python)
#     language: python
#     name: labkit
# ---

# %% [markdown]
# # Lab 2 · Protect the collective
#
# *About 45 minutes. The rule check needs no root; the run (about 30 seconds) does.*
#
# When storage traffic and a collective share a queue, the collective waits behind
# storage at every port they share (lab 1). labkit's answer is an eBPF classifier on every
# router port: it sorts each packet into a lane (`vip`, `normal` or `low`) by rules you
# write in the scenario file, and the port sends the vip lane first, always. Rules only
# help if they are right, though. In this lab you start from a scenario whose lanes went
# wrong, write better rules, and prove on a real run that the collective is protected.
#
# Cells marked *your answer* hold `...`: fill them in, run them, then run the check below.

# %%
from pathlib import Path

import yaml

from labkit.analysis.frames import summary_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots
from labkit.ui.labs import lanes as lab

BASE = Path("shared-lane.yaml")
run = None  # the real run, once its cell (near the end) has run

# %% [markdown]
# ## 1. The starting point
#
# `shared-lane.yaml` (next to this notebook) is the bottleneck fabric of lab 1: the
# All-Reduce ring over g1-g8 and st1's reads to g1-g4 cross leaf1's uplink. Its `lanes:`
# section is where it went wrong. Rules are tried in order; the first that matches a
# packet decides its lane, and a packet no rule matches goes to `normal`.

# %%
print(yaml.safe_dump({"lanes": yaml.safe_load(BASE.read_text())["lanes"]}))

# %% [markdown]
# With these rules, storage and the ring share the vip lane, so strict priority has
# nothing to put first: the ring waits behind storage as if the port had one FIFO queue.
# A recorded run of the same fabric shows what that costs. Compare `fifo` (one queue for
# everything) with `priority` (correct lanes): `slowdown_p99` is the ring's 99th
# percentile completion time divided by its time alone.

# %%
summary_frame(load_run(lab.SAMPLE_BOTTLENECK).summary, digits=2).select(
    "policy", "p99_ms", "slowdown_p99", "storage_mbps")

# %% [markdown]
# ## 2. Your rules
#
# Write a `lanes:` section as a Python dict: lane name -> list of rules, each rule a dict
# of fields that must all match. The fields (docs/scenarios.md): `roce: True` (RoCEv2:
# UDP to port 4791 with an InfiniBand header), `dscp`, `udp_dport`, `udp_sport`,
# `udp_port`, `tcp_dport`, `tcp_sport`, `tcp_port` (`*_port` matches either side).
# The ring speaks RoCEv2; storage speaks NVMe/TCP on port 4420 (the server's side).
#
# Goal: the ring's packets in vip, storage's out of it (ideally in low).

# %% tags=["answer"]
# your answer: {"vip": [...], "low": [...]}
LANES = ...

# %% [markdown]
# First, on paper: where do your rules put each kind of packet? This check sorts sample
# packets with the same first-match logic as the classifier, and also validates the rules
# exactly as labkit would read them from a scenario file.

# %%
lab.check_lane_rules(LANES, BASE)

# %% [markdown]
# ## 3. Run it
#
# This builds the fabric twice, for about 6 seconds of traffic each: the ring alone
# (`isolated`, the yardstick) and ring plus storage under `priority` with your rules.
# It needs root; without it, it says why and does nothing. The run is recorded in
# `data/runs/` like any other (`labkit report` reads it back).

# %% tags=["live"]
run = lab.run_with_lanes(BASE, LANES)

# %%
lab.check_protected(run)

# %% [markdown]
# ## 4. Look closer
#
# Each op's completion time under both policies, and the queue at the bottleneck port: with
# good rules the queue is storage's, in its own lane, while the ring's lane stays nearly
# empty.

# %%
plots.op_time_cdf(run) if run is not None else "no run yet"

# %%
plots.queue_timeline(run) if run is not None else "no run yet"

# %% [markdown]
# Questions to discuss:
#
# * Storage still got bandwidth under `priority`. When does it get to send?
# * Would a rule `{"tcp_dport": 4420}` alone in `low` be enough? Which storage packets
#   would it miss, and where would they go?
# * What happens if you put the ring in `normal` instead of `vip` and leave storage in
#   `low`? (Hint: the classes below vip are served by HTB in priority order too, but
#   labkit gives only vip the whole link.)
