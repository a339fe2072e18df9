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
# # 01 · The bottleneck
#
# Eight GPU hosts all-reduce in a ring; four of them sit behind leaf1, whose single uplink
# the ring crosses twice. A storage host streams dataset reads to leaf1's GPUs through that
# same uplink. This notebook opens a run that `labkit run topologies/bottleneck.yaml`
# recorded (shipped in `data/sample/`) and shows what the shared queue does to the
# All-Reduce under three policies: the ring alone (`isolated`), ring and storage in one FIFO
# (`fifo`), and eBPF priority lanes (`priority`).

# %%
import polars as pl

import labkit
from labkit.analysis.frames import fidelity_frame, summary_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

run = load_run(labkit.sample("bottleneck"))

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

# %% [markdown] tags=["static-figure"]
# ![Completion-time CDFs of the All-Reduce ops of data/sample/bottleneck under isolated, fifo and priority](../docs/figures/completion-cdf-bottleneck.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# The queue itself, sampled from the kernel's HTB counters at the bottleneck port: under
# `fifo` it sits near the buffer's size; under `priority` the backlog is storage's, in its
# own lane, while the ring's lane stays empty.

# %%
plots.queue_timeline(run)

# %% [markdown] tags=["static-figure"]
# ![The backlog at the bottleneck port of data/sample/bottleneck over time, per policy](../docs/figures/queue-timeline-bottleneck.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Explore the recorded run, no root needed: pick policies and lanes, narrow the time window
# to part of the ops, choose a percentile. The curves are each packet's time in the
# bottleneck queue; the table follows. Below them, the queue of the ports you pick (the run
# watched both directions of the bottleneck link) over the same window, with its backlog,
# throughput and losses per port.

# %%
widgets.explorer(run)

# %% [markdown] tags=["static-figure"]
# ![Per-lane time in the bottleneck queue of data/sample/bottleneck, a CDF per policy and lane](../docs/figures/lane-sojourn-bottleneck.svg)
#
# ![The backlog at the bottleneck port of data/sample/bottleneck over time, per policy](../docs/figures/queue-timeline-bottleneck.svg)
#
# *The explorer as it opens, as static copies from `docs/figures/` (drawn from the same
# sample by `make samples`), for reading without a kernel.*

# %% [markdown]
# ## Can you trust these numbers?
#
# The links above run at 100 Mbit/s, and the scenario says each emulated Mbit/s stands for
# 4 real Gbit/s. Why not emulate 400 Gbit/s directly? Because every packet costs this
# machine CPU: the rank agents build and read it, and the kernel carries it through every
# router, its queue and its eBPF programs. A faster link needs more packets per second, and
# past some rate the machine, not the network, sets the pace. So labkit slows the whole
# fabric down by one factor, and every run checks that the slowed-down version still
# behaves like a network:
#
# * **kept time**: while packets wait at a bottleneck port, the kernel should send the next
#   one exactly one wire time after the last. labkit times those gaps (`dev_*` are the
#   deviations from the wire time, `excess` how much longer the queue took to drain than
#   the link's rate allows);
# * **kept up**: the machine was not CPU-bound, and the All-Reduce alone reached its links'
#   rate (otherwise the traffic generator, not the network, was the limit).
#
# `labkit calibrate topologies/bottleneck.yaml` runs the scenario at its rates times 1, 2,
# 4, ... and reports the fastest that holds. Here are two recordings of this fabric for
# 10 seconds each: at its own rates, and at 8 times them (800 Mbit/s), more than the
# machine that recorded them could hold: there the All-Reduce alone reached
# 266 Mbit/s<!-- fidelity/x8 policies.isolated.allreduce.busbw_mbps --> of busbw (`data/sample/fidelity/x8`).

# %%
at_rate = {"x1 (100 Mbit/s)": load_run(labkit.sample("fidelity/x1")),
           "x8 (800 Mbit/s)": load_run(labkit.sample("fidelity/x8"))}
pl.concat([fidelity_frame(r.summary, digits=3).select(
    pl.lit(name).alias("rates"), "policy", "cpu_busy", "cpu_bound", "generator_limited",
    "port", "dev_p50", "dev_p99", "excess", "kept_time") for name, r in at_rate.items()])

# %% [markdown]
# At both rates the bottleneck port kept time: its queue drained at the link's rate
# (`excess` near 0). What broke at 8x is the machine: the ring alone was CPU-bound and
# reached a fraction of its 800 Mbit/s links. The slowdown is measured against that ring
# alone, so the handicapped baseline makes `fifo` look milder than it is:

# %%
pl.concat([summary_frame(r.summary, digits=2).select(
    pl.lit(name).alias("rates"), "policy", "p99_ms", "slowdown_p99", "busbw_mbps",
    "storage_mbps", "cpu_bound") for name, r in at_rate.items()])

# %% [markdown]
# `labkit run` prints such warnings before its tables, and every figure of a run whose
# links did not keep time says so in its subtitle. Trust a comparison only between runs
# that kept time and kept up; when a fabric does not fit, scale its rates down (and the
# scale factor up) until `labkit calibrate` says it holds.
#
# ## Try it live
#
# With root, this runs the scenario for real for about 20 seconds under the three
# policies, with the storage load, message size and number of GPU hosts you pick; without
# root it says why it cannot.

# %%
widgets.live_panel(labkit.scenario_file("bottleneck"))
