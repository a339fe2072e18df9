# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Adaptive congestion control
#
# No lanes this time: every port of `checkpoint-burst` is a single shallow FIFO, and storage
# (dataset reads at 1.2x the uplink, a checkpoint from every GPU host every two seconds)
# shares it with the All-Reduce. An eBPF gate on each host's NIC holds storage back, in the
# kernel, whichever program sent it (labkit's storage agents are plain TCP senders), moved by
# three controllers: `reactive` (AIMD on the queue it sees, late by the telemetry delay),
# `proactive` (it learns the rhythm of the bursts from the traffic alone) and `state-aware`
# (the job tells its host's gate when it communicates). The shipped run is short (10 s per
# policy); `labkit run topologies/checkpoint-burst.yaml` records the full one.

# %%
from pathlib import Path

from labkit.analysis.metrics import summary_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

run = load_run(Path("..") / "data" / "sample" / "checkpoint-burst")

# %%
summary_frame(run.summary, digits=2).select(
    "policy", "slowdown_p50", "slowdown_p99", "storage_mbps", "bottleneck_used", "vip_drops")

# %% [markdown]
# What each controller did, laid over the All-Reduce ops (shaded) and the queue at the
# bottleneck. The reactive controller cuts storage only once the queue is there; the
# proactive one holds it just before a burst it predicted; the state-aware gates hold it
# for exactly the windows the job announced.

# %%
plots.valve_timeline(run, "reactive")

# %%
plots.valve_timeline(run, "proactive")

# %%
plots.valve_timeline(run, "state-aware")

# %% [markdown]
# The result, op by op.

# %%
plots.op_time_cdf(run)

# %% [markdown]
# Explore the recorded run, no root needed. The ports here are one FIFO each: the lanes only
# label the packets that share it, so the curves show whom each policy kept waiting. Pick
# `leaf1-eth4` among the ports too: the uplink's other direction, which the checkpoints of
# leaf1's GPU hosts cross on their way to storage.

# %%
widgets.explorer(run)

# %% [markdown]
# ## Try it live
#
# With root: a short run of `checkpoint-burst.yaml` alone, under FIFO and with state-aware
# gates.

# %%
widgets.live_panel(Path("..") / "topologies" / "checkpoint-burst.yaml",
                   ("isolated", "fifo", "state-aware"))
