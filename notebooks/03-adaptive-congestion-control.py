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
import labkit
from labkit.analysis.frames import summary_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

run = load_run(labkit.sample("checkpoint-burst"))

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

# %% [markdown] tags=["static-figure"]
# ![What the reactive controller let storage send in data/sample/checkpoint-burst, over the ops and the queue](../docs/figures/valves-reactive-checkpoint-burst.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %%
plots.valve_timeline(run, "proactive")

# %% [markdown] tags=["static-figure"]
# ![What the proactive controller let storage send in data/sample/checkpoint-burst, over the ops and the queue](../docs/figures/valves-proactive-checkpoint-burst.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %%
plots.valve_timeline(run, "state-aware")

# %% [markdown] tags=["static-figure"]
# ![What the state-aware gates let storage send in data/sample/checkpoint-burst, over the ops and the queue](../docs/figures/valves-state-aware-checkpoint-burst.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# The result, op by op.

# %%
plots.op_time_cdf(run)

# %% [markdown] tags=["static-figure"]
# ![Completion-time CDFs of the All-Reduce ops of data/sample/checkpoint-burst, per policy](../docs/figures/completion-cdf-checkpoint-burst.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Explore the recorded run, no root needed. The ports here are one FIFO each: the lanes only
# label the packets that share it, so the curves show whom each policy kept waiting. Pick
# `leaf1-eth4` among the ports too: the uplink's other direction, which the checkpoints of
# leaf1's GPU hosts cross on their way to storage.

# %%
widgets.explorer(run)

# %% [markdown] tags=["static-figure"]
# ![Per-lane time in the bottleneck queue of data/sample/checkpoint-burst, a CDF per policy and lane](../docs/figures/lane-sojourn-checkpoint-burst.svg)
#
# ![The backlog at the bottleneck port of data/sample/checkpoint-burst over time, per policy](../docs/figures/queue-timeline-checkpoint-burst.svg)
#
# *The explorer as it opens, as static copies from `docs/figures/` (drawn from the same
# sample by `make samples`), for reading without a kernel.*

# %% [markdown]
# ## DCQCN beside storage TCP
#
# The same scenario with `control.dcqcn: true` (`data/sample/checkpoint-burst-dcqcn`, 8 s
# per policy): the ring's packets are ECN-capable, the valves at the bottleneck mark them
# past `fabric_ce_us`, receivers answer with CNPs and the senders cut their rate. Under
# `fifo` there is no valve, so no mark: the ring loses packets and resends them as before.
# Under the controllers the ring stops losing packets, but it now yields too, to its own
# queue and to the storage TCP that shares the FIFO with it: where storage keeps that queue
# long, DCQCN hands the port to TCP.

# %%
import polars as pl

dcqcn = load_run(labkit.sample("checkpoint-burst-dcqcn"))


def by_policy(r, label):
    sent = r.tables["transport"].group_by("policy").agg(
        pl.col("cnps").sum(), pl.col("retransmits").sum())
    return (summary_frame(r.summary, digits=2)
            .select("policy", "slowdown_p99", "storage_mbps", "vip_drops")
            .join(sent, on="policy", how="left").with_columns(dcqcn=pl.lit(label)))


order = pl.Enum(list(run.summary.policies))
pl.concat([by_policy(run, "off"), by_policy(dcqcn, "on")]).sort(
    pl.col("policy").cast(order), "dcqcn", descending=[False, True])

# %%
plots.op_time_cdf(dcqcn)

# %% [markdown] tags=["static-figure"]
# ![Completion-time CDFs of the All-Reduce ops of data/sample/checkpoint-burst-dcqcn, per policy](../docs/figures/completion-cdf-checkpoint-burst-dcqcn.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# ## DCTCP vs TCP
#
# The gates hold storage at the senders' NICs; the senders' own congestion control can
# react too. `transport: {tcp: dctcp}` runs lk_dctcp, a DCTCP written in eBPF
# (`bpf/dctcp.bpf.c`), for every TCP socket of the hosts, and the bottleneck ports mark
# CE once K packets are queued. `topologies/dctcp-paper.yaml` is the DCTCP paper's port:
# two iperf3 flows into one 100 Mbit/s port with a 120-packet buffer over 0.25 ms links
# (`data/sample/dctcp-paper/dctcp`), and beside it the paper's TCP, Reno, at the same
# port without marks (`data/sample/dctcp-paper/reno`). TCP fills the buffer, drops and
# halves, a slow sawtooth near the top; DCTCP holds the queue at K, in the band its
# analysis predicts.

# %%
paper = {name: load_run(labkit.sample(f"dctcp-paper/{path}"))
         for name, path in (("DCTCP (lk_dctcp, K = 20)", "dctcp"), ("TCP (Reno)", "reno"))}
plots.dctcp_queue(paper)

# %% [markdown]
# Each bottleneck port's queue in full frames, its marks, and each lk_dctcp flow: DCTCP's
# alpha, how many of its windows met marks and its window.

# %%
pl.DataFrame([{"run": name, "port": port, **q.to_json()}
              for name, r in paper.items()
              for port, q in r.summary.policies["fifo"].queues.ports.items()])

# %%
pl.DataFrame([{"flow": flow, **f.to_json()}
              for flow, f in paper["DCTCP (lk_dctcp, K = 20)"].summary.policies["fifo"]
              .tcp.flows.items() if f.windows >= 100])

# %% [markdown]
# And on `checkpoint-burst`: the storage TCP under lk_dctcp with the uplink marking at K
# (`data/sample/checkpoint-burst-dctcp`), beside plain FIFO. The ring waits less and
# loses fewer packets, but DCTCP cannot hold this queue at K: each of the many storage
# flows keeps at least two jumbo frames in flight, more than K all together, and the
# checkpoints start every burst in slow start.

# %%
dctcp = load_run(labkit.sample("checkpoint-burst-dctcp"))
pl.concat([summary_frame(r.summary, digits=2).filter(pl.col("policy") == "fifo")
           .select("policy", "slowdown_p50", "slowdown_p99", "storage_mbps", "vip_drops")
           .with_columns(tcp=pl.lit(label))
           for r, label in ((run, "default (BBR)"), (dctcp, "lk_dctcp, K = 20"))])

# %% [markdown]
# ## Try it live
#
# With root: a short run of `checkpoint-burst.yaml` alone, under FIFO and with state-aware
# gates.

# %%
widgets.live_panel(labkit.scenario_file("checkpoint-burst"),
                   ("isolated", "fifo", "state-aware"))
