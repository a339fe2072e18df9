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
# # 04 · Parallelism: tensor, pipeline, data, expert
#
# The same batch, two ways to split a model over eight GPU hosts on the `bottleneck` fabric.
# Tensor parallelism all-reduces activations after every layer, forward and backward: many
# small, latency-bound collectives, all of them across leaf1's uplink. Pipeline parallelism
# sends activations and gradients point to point at stage boundaries, micro-batch by
# micro-batch; only one boundary crosses the uplink, and stages wait for each other
# (bubbles). Both runs are shipped in `data/sample/`, each under `isolated` and `fifo`.

# %%
import polars as pl

import labkit
from labkit.analysis.frames import (
    culprits_frame,
    program_ops_frame,
    straggled_ops,
    summary_frame,
)
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

runs = {kind: load_run(labkit.sample(f"{kind}-parallel")) for kind in ("tensor", "pipeline")}

# %%
pl.concat([summary_frame(run.summary, digits=3).select(
    pl.lit(kind).alias("parallelism"), "policy", "p50_ms", "slowdown_p50", "exposed_comm",
    "bubbles", "bottleneck_mb_per_iter") for kind, run in runs.items()])

# %% [markdown]
# Tensor parallelism moves far more data across the bottleneck per iteration, so storage
# contention there slows it far more.

# %%
plots.parallelism_comparison(runs)

# %% [markdown]
# Where an iteration's time goes: compute, waits for data on the wire, and bubbles (waits
# for a stage that had not sent yet).

# %%
plots.parallelism(runs["tensor"])

# %% [markdown] tags=["static-figure"]
# ![Where the tensor-parallel job's iteration time goes, per policy](../docs/figures/parallelism-tensor-parallel.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %%
plots.parallelism(runs["pipeline"])

# %% [markdown] tags=["static-figure"]
# ![Where the pipeline-parallel job's iteration time goes, per policy](../docs/figures/parallelism-pipeline-parallel.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Explore either recorded run, no root needed: the time the job's packets spent in the
# bottleneck queue, per lane and policy, and the queue of the ports you pick, over the part
# of the run you pick.

# %%
widgets.explorer({f"{kind} parallel": run for kind, run in runs.items()})

# %% [markdown] tags=["static-figure"]
# ![Per-lane time in the bottleneck queue of data/sample/tensor-parallel, a CDF per policy and lane](../docs/figures/lane-sojourn-tensor-parallel.svg)
#
# ![The backlog at the bottleneck port of data/sample/tensor-parallel over time, per policy](../docs/figures/queue-timeline-tensor-parallel.svg)
#
# *The explorer as it opens, as static copies from `docs/figures/` (drawn from the same
# sample by `make samples`), for reading without a kernel.*

# %% [markdown]
# ## Data and expert parallelism
#
# Two more ways to split the work, on the same fabric and storage (`data-parallel.yaml`,
# `expert-parallel.yaml`, shipped under `isolated`, `fifo` and `priority`). Data
# parallelism all-reduces the whole gradient once per iteration, in buckets; expert
# parallelism (a mixture of experts) exchanges tokens all-to-all twice per layer, half of
# every exchange across the uplink. Both move megabytes across the bottleneck per
# iteration, so both are slowed by storage under `fifo`, and the vip lane gives both their
# isolated times back.

# %%
more = {kind: load_run(labkit.sample(f"{kind}-parallel")) for kind in ("data", "expert")}
pl.concat([summary_frame(run.summary, digits=3).select(
    pl.lit(kind).alias("parallelism"), "policy", "p50_ms", "slowdown_p50", "slowdown_p99",
    "exposed_comm", "bottleneck_mb_per_iter", "storage_mbps") for kind, run in more.items()])

# %%
plots.parallelism_comparison({**runs, **more})

# %% [markdown]
# ## When one rank or one link is slow
#
# A ring All-Reduce moves at the pace of its slowest member, and a data-parallel job's
# iteration cannot end before its All-Reduce has. Two faults on the fabric above, each put
# on the run's timeline by the scenario's `events` (docs/scenarios.md), with no storage:
#
# **A straggler.** `data/sample/straggler` (`topologies/straggler.yaml`) is the
# data-parallel job with g3 computing twice as long for three seconds, as a GPU throttled
# by its heat. No rank can finish the step's All-Reduce before g3 has sent its part, so
# every other rank waits for it in a bubble and each iteration grows by g3's extra
# compute, once: the job's median iteration is 329 ms<!-- straggler policies.isolated.job.p50_ms -->,
# its p99 469 ms<!-- straggler policies.isolated.job.p99_ms -->. The last iteration
# before g3 slowed, and the first it slowed:

# %%
straggler = load_run(labkit.sample("straggler"))
plots.job_timeline(straggler, straggled_ops(straggler))

# %% [markdown] tags=["static-figure"]
# ![g3 computes twice as long; every other rank waits in a bubble](../docs/figures/job-timeline-straggler.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# labkit's summary names a culprit for each slow phase of the job (`culprits`,
# docs/data-model.md; `labkit report` prints them) from the ranks' own records and the
# bottleneck port's counters, never from the events: here the rank on g3, whose compute
# grew while the others' bubbles did. Lab 6, *Find the straggler*, asks students to find
# it themselves from the same tables before they look.

# %%
culprits_frame(straggler.summary)

# %% [markdown]
# **A slow link.** `data/sample/link-faults` (`topologies/link-faults.yaml`) is the ring
# All-Reduce of notebook 01 without its storage, its shared uplink down for half a second,
# later at half its rate for two seconds, and g3's link losing packets in short bursts. Every hop of a ring
# carries the same bytes, so the ring runs at its slowest link's pace: while the uplink
# is down no op ends, and at half rate every op takes about twice as long (the
# alpha-beta model: tests/tier2/test_slow_link.py). Its median op is
# 304 ms<!-- link-faults policies.isolated.allreduce.p50_ms -->, its p99
# 920 ms<!-- link-faults policies.isolated.allreduce.p99_ms -->. The queue at the
# bottleneck, with each event drawn as a band:

# %%
faults = load_run(labkit.sample("link-faults"))
plots.queue_timeline(faults)

# %% [markdown] tags=["static-figure"]
# ![The backlog at the bottleneck port of data/sample/link-faults over time, its events drawn as bands](../docs/figures/queue-timeline-link-faults.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# **A failed spine link, routed around.** `data/sample/faults` (`topologies/faults.yaml`)
# puts a degraded host link, a straggler and a failed spine link on one timeline, on a
# fabric whose routers run BGP with BFD (`fabric.routing: bgp`, FRR in every router). When
# leaf2's link to spine2 dies, BFD misses its packets, BGP withdraws the routes that used
# it and the traffic between the leaves moves to spine1; when the link heals, a new
# session brings the routes back. The bottleneck ports' own counters, with the moments the
# last router's routes moved and came back:

# %%
routed = load_run(labkit.sample("faults"))
plots.reroutes(routed)

# %% [markdown] tags=["static-figure"]
# ![leaf1's traffic to leaf2 moves from spine2 to spine1 while leaf2's link to spine2 is down, and back](../docs/figures/reroutes-faults.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# ## Your own training job
#
# The same fabric with a real PyTorch job as the workload: `docs/examples/ddp.py` trains a
# small model with DistributedDataParallel over gloo, on the CPU, eight ranks, 2 MiB of
# gradients all-reduced every step, against the dataset reads and an unmodified iperf3
# stream (`topologies/pytorch-ddp.yaml`, recorded in `data/sample/pytorch-ddp`). labkit
# started each rank as torchrun would, each in a cgroup of its own; an eBPF program on
# every rank's NIC marked the job's packets as the collective's, on whatever ports gloo
# chose, and `labkit.torch` timed its steps (docs/programs.md). Its iterations per policy:

# %%
ddp = load_run(labkit.sample("pytorch-ddp"))
summary_frame(ddp.summary, digits=2).select(
    "policy", "ops", "p50_ms", "p99_ms", "slowdown_p50", "slowdown_p99", "exposed_comm",
    "storage_mbps", "bottleneck_used", "vip_drops")

# %% [markdown]
# Storage under `fifo` makes every iteration several times slower; the vip lane
# (`priority`) gives the job the isolated run's times. The controllers hold storage back
# at its senders while the job's packets cross the bottleneck, which the kernel sees
# without the job's help: `state-aware` comes within a few percent of `priority` over a
# single FIFO port, with no vip drop, and leaves storage most of the rest of the port;
# what it gives up is the time the job's stalls and the relay's latency cost.

# %%
plots.op_time_cdf(ddp)

# %% [markdown] tags=["static-figure"]
# ![Iteration-time CDFs of the PyTorch DDP job of data/sample/pytorch-ddp, per policy](../docs/figures/completion-cdf-pytorch-ddp.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Where its iterations' time goes (compute includes the emulated GPU time, a sleep), and
# its gradient all-reduces as the comm hook timed them: two buckets a step, side by side.

# %%
plots.parallelism(ddp)

# %% [markdown] tags=["static-figure"]
# ![Where the PyTorch DDP job's iteration time goes, per policy](../docs/figures/parallelism-pytorch-ddp.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %%
program_ops_frame(ddp.summary, digits=1)

# %% [markdown]
# ## Try it live
#
# With root: a short run of the tensor-parallel job with your activation size (the message
# slider), number of GPU hosts and storage load.

# %%
widgets.live_panel(labkit.scenario_file("tensor-parallel"), ("isolated", "fifo"))
