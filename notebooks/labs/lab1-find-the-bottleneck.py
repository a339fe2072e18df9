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
# # Lab 1 · Find the bottleneck
#
# *About 40 minutes. The checks need no root; the optional last part does.*
#
# In a training cluster the network rarely fails loudly: somewhere a port receives more
# than it can send, a queue grows in front of it, and every packet that passes waits its
# turn. In this lab you read a fabric's description, predict where that queue forms, and
# then check your prediction against a run that labkit recorded on that very fabric.
#
# **How the checks work.** Cells marked *your answer* hold a variable set to `...`.
# Replace the `...`, run the cell, then run the check cell below it. A check answers
# *passed*, *not yet* (with what is wrong and a hint) or *not answered yet*. Try as often
# as you like: nothing breaks.

# %%
from labkit.runs.rundir import load_run
from labkit.ui import plots
from labkit.ui.labs import bottleneck as lab

# %% [markdown]
# ## 1. Read the fabric
#
# This is `topologies/bottleneck.yaml`, the scenario file labkit ran. Look for three
# things: which hosts hang off which router, how fast each link is, and who sends to whom
# (`traffic:`). Rates are in emulated Mbit/s.

# %%
print(lab.SCENARIO.read_text())

# %% [markdown]
# The same links as a table. A host link not listed under `fabric.links` takes
# `defaults.link`; `buffer_kb` is how much each port can queue before it drops.

# %%
lab.links()

# %% [markdown]
# Things worth working out on paper before you answer:
#
# * The All-Reduce is a ring over `gpu` in order: g1 sends to g2, ..., g8 sends back to
#   g1. Which of those hops leave their leaf?
# * `storage` reads mean st1 sends data to g1-g4 at `offered_load` times the bottleneck
#   link's rate in total. Which way does that data cross the fabric?
# * A queue builds only where traffic from *several* inputs meets an output that cannot
#   carry it all. A host that tries to send faster than its own NIC is simply held back by
#   its socket, so look at the routers' ports.
#
# ## 2. Your prediction
#
# Name the port where the longest queue forms, as the node that sends and the neighbour
# it sends to, for example `("leaf2", "st1")` for leaf2's port towards st1.

# %% tags=["answer"]
# your answer: (node, neighbour it sends to)
QUEUE_AT = ...

# %%
lab.check_queue_port(QUEUE_AT)

# %% [markdown]
# ## 3. Why there?
#
# The table lists every router port with the traffic the scenario sends through it, and
# what that traffic would add up to if nothing upstream slowed it down. Several ports get
# offered more than their rate. But a flow can only be slowed once on its way: the first
# port that is too slow for it decides how much reaches the ports after it. Find that
# port for st1's data and for the ring's hop from g8 to g1.

# %%
lab.port_traffic()

# %% [markdown]
# The recording agrees: the queue at the bottleneck port, sampled from the kernel about
# 125 times a second, for the three policies of the run (`isolated`: the ring alone;
# `fifo`: ring and storage in one queue; `priority`: eBPF lanes).

# %%
run = load_run(lab.SAMPLE)
plots.queue_timeline(run)

# %% [markdown] tags=["static-figure"]
# ![The backlog at the bottleneck port of data/sample/bottleneck over time, per policy](../../docs/figures/queue-timeline-bottleneck.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# ## 4. How long does a full queue hold a packet?
#
# A packet that arrives at a full queue waits until everything in front of it has been
# sent. Using only the scenario file (the bottleneck link's `buffer_kb` and `rate_mbps`),
# work out how many **milliseconds** the port needs to send a full buffer. Careful with
# bits and bytes.

# %% tags=["answer"]
# your answer: milliseconds
FULL_QUEUE_MS = ...

# %%
lab.check_full_queue_wait(FULL_QUEUE_MS)

# %% [markdown]
# ## 5. Who waits under priority lanes?
#
# Under the `priority` policy an eBPF classifier sorts packets into lanes (see `lanes:`
# in the file) and the port always sends the vip lane first. The bottleneck port still
# receives more than it can send, so some lane's queue fills. Which one: `"vip"`,
# `"normal"` or `"low"`?

# %% tags=["answer"]
# your answer: a lane name
WHO_WAITS = ...

# %%
lab.check_waiting_lane(WHO_WAITS)

# %% [markdown]
# ## 6. Optional: look for yourself (needs root)
#
# `labkit shell` builds the same fabric with no traffic and opens Mininet's command line
# in it. In a terminal at the top of the repository:
#
# ```sh
# sudo .venv/bin/labkit shell topologies/bottleneck.yaml --policy fifo
# ```
#
# Then, at the `mininet>` prompt:
#
# ```text
# g1 ping -c 3 g5                         # the fabric is quiet: round trips well under 1 ms
# g1 iperf3 -s -D                         # a server on g1, in the background
# st1 iperf3 -c g1 -t 30 &                # st1 floods g1 for 30 s, across the fabric
# g5 ping -c 5 g1                         # the same trip as g8's ring hop: how long now?
# spine1 tc -s qdisc show dev spine1-eth0 # the queue you predicted: look at "backlog"
# leaf1 tc -s qdisc show                  # leaf1's ports, for comparison
# exit                                    # tears everything down
# ```
#
# The ping from g5 to g1 crosses spine1's port towards leaf1 behind st1's data: its round
# trip grows by up to the time you computed in part 4 (TCP keeps the buffer full only part
# of the time). `tc` shows that port's backlog
# near its buffer size while leaf1's ports stay almost empty.
