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
# # 02 · Priority queuing: three lanes
#
# The eBPF classifier on every router port sorts packets into lanes: RoCEv2 collectives into
# `vip`, NVMe/TCP storage into `low`, everything else into `normal`; under `priority` each
# lane is its own HTB class, served in strict priority. This notebook opens the shipped
# `bottleneck` run and asks two questions: how long does each lane's traffic wait at the
# bottleneck, and what do the lanes cost storage?

# %%
import labkit
from labkit.analysis.frames import summary_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

run = load_run(labkit.sample("bottleneck"))

# %% [markdown]
# Time in the bottleneck queue, per lane, measured per packet by eBPF on the qdisc
# tracepoints. Pick a run and policies and lanes, narrow the time window, choose a
# percentile: the curves and the table follow, and so does the queue of the ports you pick,
# per port. (`checkpoint-burst` has no lanes in its ports: there the lanes only label the
# packets that share one FIFO.)

# %%
widgets.explorer({name: load_run(labkit.sample(name))
                  for name in ("bottleneck", "checkpoint-burst")})

# %% [markdown] tags=["static-figure"]
# ![Per-lane time in the bottleneck queue of data/sample/bottleneck, a CDF per policy and lane](../docs/figures/lane-sojourn-bottleneck.svg)
#
# ![The backlog at the bottleneck port of data/sample/bottleneck over time, per policy](../docs/figures/queue-timeline-bottleneck.svg)
#
# *The explorer as it opens, as static copies from `docs/figures/` (drawn from the same
# sample by `make samples`), for reading without a kernel.*

# %% [markdown]
# What the lanes cost storage: its goodput and the bottleneck's use under each policy.
# Strict priority does not starve storage here: it takes what the collectives leave.

# %%
summary_frame(run.summary, digits=2).select("policy", "storage_mbps", "bottleneck_used",
                                             "vip_drops", "low_drops")

# %% [markdown]
# And what they buy the collectives: completion times per policy.

# %%
plots.op_time_cdf(run)

# %% [markdown] tags=["static-figure"]
# ![Completion-time CDFs of the All-Reduce ops of data/sample/bottleneck under isolated, fifo and priority](../docs/figures/completion-cdf-bottleneck.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Every queue on the way, end to end: the one-way latency of the collective's packets, from
# the sender's stamp to the receiver's NIC, on every hop of the ring. Under `fifo` the hops
# that cross the bottleneck carry its queue (the curve's upper part); under `priority` they
# are back to the ring's own.

# %%
plots.collective_latency(run)

# %% [markdown]
# ## Try it live
#
# With root: a 20-second run of `bottleneck.yaml` under the three policies with your
# storage load, message size and number of GPU hosts.

# %%
widgets.live_panel(labkit.scenario_file("bottleneck"))
