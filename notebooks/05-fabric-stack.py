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
# # 05 · The fabric stack: lossless fabric, RDMA transport, collective library
#
# Three layers decide how fast an All-Reduce runs. The **fabric** decides whether packets
# are lost; the **transport** (RoCE RC here) decides what a loss costs: go-back-N resends
# everything after the lost packet; the **collective library** picks an algorithm whose
# traffic pattern suits the topology. These sweeps (`labkit sweep`, like nccl-tests)
# measure each layer on a two-spine leaf-spine fabric with 100 Mbit/s links; they are
# shipped in `data/sample/sweeps/`.

# %%
from pathlib import Path

from labkit import plots, widgets
from labkit.analysis import sweep_frame
from labkit.rundir import load_sweeps

sweeps = load_sweeps(Path("..") / "data" / "sample" / "sweeps")
SCALE = "leaf-spine and lossy-uplink · 1 emulated Mbit/s = 4000 real Mbit/s"

# %% [markdown]
# **The collective library:** ring, double binary tree and recursive halving-doubling on
# the same lossless fabric. Here the ring wins at every size: most of its hops stay under
# one leaf, and only two of its flows cross the spines. Halving-doubling's exchanges at
# distance four send four flows across leaf1's two uplinks at once; when ECMP hashes two
# onto the same spine, that port's buffer overflows, and go-back-N pays for every loss
# (see the retransmissions below). An algorithm has to suit the topology.

# %%
plots.sweep_busbw({k: v for k, v in sweeps.items() if not k.endswith("lossy")}, SCALE)

# %% [markdown]
# **The fabric and the transport:** the ring again, with 0.1 % of packets dropped on every
# leaf-spine link. Each loss makes go-back-N resend the rest of the message.

# %%
plots.sweep_busbw({k: v for k, v in sweeps.items() if k.startswith("ring")}, SCALE)

# %% [markdown]
# Packets resent by go-back-N in each sweep (all ranks, per message size):

# %%
sweep_frame(sweeps).pivot(on="sweep", index="size", values="retransmits")

# %% [markdown]
# Explore the sweeps, no root needed: pick sweeps and a range of message sizes; the plot and
# the table of what each sweep measured follow.

# %%
widgets.sweep_explorer(sweeps, SCALE)

# %% [markdown]
# ## Try it live
#
# With root: the ring All-Reduce for a few seconds on the lossy uplinks, at the message
# size and number of GPU hosts you pick. (`labkit sweep` records a whole sweep.)

# %%
widgets.live_panel(Path("..") / "topologies" / "lossy-uplink.yaml", ("isolated",))
