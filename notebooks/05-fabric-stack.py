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
# # 05 · The fabric stack: lossy or lossless fabric, RDMA transport, collective library
#
# Three layers decide how fast an All-Reduce runs. The **fabric** decides whether packets
# are lost: a plain Ethernet fabric drops when a buffer overflows; a fabric with link-level
# pause (PFC) tells the sender to stop instead, and drops nothing. The **transport** (RoCE
# RC here) decides what a loss costs: go-back-N resends everything after the lost packet.
# The **collective library** picks an algorithm whose traffic pattern suits the topology.
#
# labkit's fabrics are lossy unless a scenario says `fabric.lossless: true`
# (`docs/lossless.md`). Everything below ships in `data/sample/` (`make samples` records
# it again, each sample by the command `data/sample/samples.yaml` gives): sweeps
# (`labkit sweep`, like nccl-tests) and two runs of `topologies/lossless.yaml`.

# %%
import labkit
from labkit.analysis.frames import (
    auto_frame,
    lossless_frame,
    pause_frame,
    placement_frame,
    sweep_frame,
)
from labkit.runs.rundir import load_run, load_sweeps, load_tuning
from labkit.ui import plots, widgets

sweeps = load_sweeps(labkit.sample("sweeps"))
SCALE = "leaf-spine and lossy-uplink · 1 emulated Mbit/s = 4000 real Mbit/s"

# %% [markdown]
# **The collective library, on a lossy fabric:** ring, double binary tree and recursive
# halving-doubling on a two-spine leaf-spine fabric with 100 Mbit/s links and 1 MiB port
# buffers. The ring wins at every size: most of its hops stay under one leaf, and only two
# of its flows cross the spines. Halving-doubling's exchanges at distance four send four
# flows across leaf1's two uplinks at once; when ECMP hashes two onto the same spine, that
# port's buffer overflows, the fabric drops, and go-back-N pays for every loss. An algorithm
# has to suit the topology.

# %%
plots.sweep_busbw({k: sweeps[k] for k in ("ring", "tree", "halving_doubling")}, SCALE)

# %% [markdown]
# **Lossy or lossless, the same sweep:** halving-doubling again, with 4 MiB buffers (the
# room a pause needs above its threshold on these links), once lossy and once with
# `--set fabric.lossless=true`. The bigger buffer alone drops less (resends only at
# 4 MiB); the lossless fabric drops nothing, and go-back-N never resends. The bandwidth
# hardly moves: what limits halving-doubling here is its crossing flows sharing two
# uplinks, lossy or not.

# %%
hd = {k: sweeps[k] for k in ("halving_doubling", "halving_doubling-deep",
                             "halving_doubling-lossless")}
plots.sweep_busbw(hd, SCALE)

# %% [markdown]
# Packets resent by go-back-N in each sweep (all ranks, per message size):

# %%
sweep_frame(sweeps).pivot(on="sweep", index="size", values="retransmits")

# %% [markdown]
# **What pause cannot fix:** the ring with 0.1 % of packets dropped on every leaf-spine
# link, as a bad cable or optic would. Pause prevents overflow, not corruption: each loss
# still makes go-back-N resend the rest of the message.

# %%
plots.sweep_busbw({k: sweeps[k] for k in ("ring", "ring-lossy")}, SCALE)

# %% [markdown]
# ## The price of lossless: pauses spread
#
# `topologies/lossless.yaml`: the ring All-Reduce and dataset reads meet at spine1's port to
# leaf1, as in notebook 01, with storage on a third leaf; and a **victim**, g5 (leaf2)
# writing to st1 (leaf3) at 10 Mbit/s, a path that never goes near leaf1. The same
# scenario ran lossy (`--set fabric.lossless=false`) and lossless. Under `fifo`, lossless
# means no drop and no resend, and here the All-Reduce is even faster for it:

# %%
runs = {name: load_run(labkit.sample(f"lossless/{name}")) for name in ("lossy", "lossless")}
lossless_frame({name: run.summary for name, run in runs.items()}, digits=2)

# %% [markdown]
# Who paused whom (the `pauses` table: one row per pause of a neighbour's queue). spine1's
# port to leaf1 pauses the two uplinks that fill it, leaf2's (the ring) and leaf3's
# (storage); paused, leaf3's uplink fills and pauses st1, and leaf2's pauses g5 and g8. A
# pause acts within a fraction of one 9000-byte frame's wire time (720 us at 100 Mbit/s):

# %%
window = runs["lossless"].summary.policies["fifo"].window_s
pause_frame(runs["lossless"]["pauses"], "fifo", window)

# %% [markdown]
# And the victim: its writes wait behind the ring's packets in leaf2's paused uplink. On a
# path with no congestion of its own, its I/Os take three to four times as long: congestion
# spreading, the reason PFC fabrics also need congestion control (DCQCN) to keep pauses
# rare.

# %%
plots.victim_io(runs)

# %% [markdown]
# ## Inside a server: the NVLink tier
#
# `fabric.gpus_per_host: 4` makes servers of four GPU hosts (`topologies/nvlink.yaml`):
# each GPU keeps its own NIC to its leaf (one rail per GPU, as in a DGX) and gains an
# NVLink to its server's switch, here ten times as fast as the NIC. The same 4-way
# tensor-parallel job, its ranks inside one server or spread over two: every layer's
# activations cross NVLink only, or half the ring's hops cross the fabric. This is why
# tensor parallelism stays inside a server, and pipeline or data parallelism spans them.

# %%
placement = {name: load_run(labkit.sample(f"nvlink/{name}")).summary
             for name in ("inside", "across")}
placement_frame(placement)

# %% [markdown]
# A server also changes which All-Reduce is fastest. On the same fabric, all eight GPUs,
# measured by `labkit tune`: the flat ring runs at the NIC's pace on its two crossings,
# while the **hierarchical** All-Reduce (reduce-scatter inside each server over NVLink, an
# All-Reduce of each quarter of the buffer across servers on its own rail, all-gather
# inside) sends a quarter of the buffer between servers per GPU:

# %%
tuned = {name: load_tuning(labkit.sample(f"tune/{name}")) for name in ("leaf-spine", "nvlink")}
plots.sweep_busbw(tuned["nvlink"].sweeps, "nvlink · 2 servers of 4 GPUs, 4 rails")

# %% [markdown] tags=["static-figure"]
# ![Bus bandwidth against message size of every All-Reduce algorithm labkit tune measured on nvlink.yaml](../docs/figures/busbw-tune-nvlink.svg)
#
# *A static copy from `docs/figures/` (with the tuning's own subtitle), drawn from the same
# sample by `make samples`: what shows where this notebook is read without a kernel.*

# %% [markdown]
# ## The collective library chooses: `algo: auto`
#
# NCCL picks an algorithm by topology and message size. `labkit tune SCENARIO` sweeps every
# All-Reduce algorithm on a scenario's fabric (the sweeps above) and fits each one's cost,
# `time = alpha + size / beta`; `algo: auto` (in a scenario, or `labkit sweep --algo auto`)
# then runs the one predicted fastest at each size, with the ranks in ring order, and says
# why. Each model, tuned at four sizes, asked at every size of a finer sweep measured after
# (`relative`: the chosen algorithm's time over the best one's there). On leaf-spine the
# ring wins everywhere; with servers, the hierarchical All-Reduce does, except at 64 KiB,
# where halving-doubling measured faster in this sweep while auto's own run of the
# hierarchical one measured faster than both: at that size runs differ by more than the
# algorithms do.

# %%
validation = {name: load_sweeps(labkit.sample(f"tune/validation-{name}")) for name in tuned}
auto_frame(tuned["leaf-spine"].model, {a: s for a, s in validation["leaf-spine"].items()
                                       if a != "auto"})

# %%
auto_frame(tuned["nvlink"].model, {a: s for a, s in validation["nvlink"].items() if a != "auto"})

# %%
plots.sweep_busbw(validation["nvlink"], "nvlink · tuned, then measured again at every size")

# %% [markdown]
# Explore the sweeps, no root needed: pick sweeps and a range of message sizes; the plot and
# the table of what each sweep measured follow.

# %%
widgets.sweep_explorer(sweeps, SCALE)

# %% [markdown]
# ## Try it live
#
# With root: the ring All-Reduce for a few seconds on the lossy uplinks, at the message
# size and number of GPU hosts you pick. (`labkit sweep` records a whole sweep;
# `labkit run topologies/lossless.yaml` the lossless run above.)

# %%
widgets.live_panel(labkit.scenario_file("lossy-uplink"), ("isolated",))
