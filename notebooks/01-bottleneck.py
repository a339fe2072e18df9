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
# # 01 · The bottleneck
#
# Eight GPU hosts all-reduce in a ring; four of them sit behind leaf1, whose single uplink
# the ring crosses twice. A storage host streams dataset reads to leaf1's GPUs through that
# same uplink. This notebook opens a run that `labkit run topologies/bottleneck.yaml`
# recorded (shipped in `data/sample/`) and shows what the shared queue does to the
# All-Reduce under three policies: the ring alone (`isolated`), ring and storage in one FIFO
# (`fifo`), and eBPF priority lanes (`priority`).

# %%
from pathlib import Path

from labkit import plots, widgets
from labkit.analysis import summary_frame
from labkit.rundir import load_run

SAMPLE = Path("..") / "data" / "sample" / "bottleneck"
run = load_run(SAMPLE)

# %% [markdown]
# The summary the run printed: completion times, their slowdown against `isolated`, the
# ring's bus bandwidth, the storage goodput and how full the bottleneck link was.

# %%
summary_frame(run.summary, digits=2).select(
    "policy", "p50_ms", "p99_ms", "slowdown_p99", "busbw_mbps", "storage_mbps", "bottleneck_used")

# %% [markdown]
# Every op's completion time. With storage in the same FIFO, the ring waits behind storage
# packets at the bottleneck on every step that crosses it, and loses packets when the queue
# overflows; with the lanes, its packets jump the queue.

# %%
plots.op_time_cdf(run)

# %% [markdown]
# The queue itself, sampled from the kernel's HTB counters at the bottleneck port: under
# `fifo` it sits near the buffer's size; under `priority` the backlog is storage's, in its
# own lane, while the ring's lane stays empty.

# %%
plots.queue_timeline(run)

# %% [markdown]
# Explore the recorded run, no root needed: pick policies and lanes, narrow the time window
# to part of the ops, choose a percentile. The curves are each packet's time in the
# bottleneck queue; the table follows. Below them, the queue of the ports you pick (the run
# watched both directions of the bottleneck link) over the same window, with its backlog,
# throughput and losses per port.

# %%
widgets.explorer(run)

# %% [markdown]
# ## Try it live
#
# With root, this runs the scenario for real for about 20 seconds under the three
# policies, with the storage load, message size and number of GPU hosts you pick; without
# root it says why it cannot.

# %%
widgets.live_panel(Path("..") / "topologies" / "bottleneck.yaml")
