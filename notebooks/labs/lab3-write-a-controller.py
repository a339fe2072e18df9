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
# # Lab 3 · Write a controller
#
# *About 50 minutes. The rehearsal needs no root; the real run (about 20 seconds) does.*
#
# Priority lanes need switches that support them. `topologies/checkpoint-burst.yaml`
# has none: every port is one shallow FIFO. What labkit can still steer is the hosts:
# an eBPF *gate* on each host's NIC holds that host's storage traffic to the rate a
# controller decides, in the kernel, while the collectives pass untouched. Hold storage
# while the ring's packets cross the bottleneck and the ring runs as if alone; release it
# while the ring computes and storage loses little.
#
# labkit ships a controller called `reactive`: it watches the queueing delay at the
# bottleneck and halves storage's rate while the delay is above a target, then lets it
# grow back by steps. In this lab you write your own controller and beat it.
#
# Cells marked *your answer* hold a blank: fill them in, run them, then run the check.

# %%
from labkit.analysis.frames import summary_frame
from labkit.control import Controller
from labkit.runs.rundir import load_run
from labkit.ui import plots
from labkit.ui.labs import controller as lab

run = None  # the real run, once its cell (near the end) has run

# %% [markdown]
# ## 1. What the controllers did in a recorded run
#
# Checkpoint bursts and dataset reads against an All-Reduce, under each of labkit's
# controllers. `slowdown_p99` is the ring's 99th percentile op time against the ring
# alone; `storage_mbps` what storage still moved.

# %%
recorded = load_run(lab.SAMPLE)
summary_frame(recorded.summary, digits=2).select(
    "policy", "p99_ms", "slowdown_p99", "storage_mbps", "bottleneck_used")

# %% [markdown]
# How `reactive` moved the gates: its decisions (storage's allowed rate) over the queue.
# Notice how long it takes, each time the ring starts an op, to bring storage down.

# %%
plots.valve_timeline(recorded, "reactive", seconds=3)

# %% [markdown] tags=["static-figure"]
# ![What the reactive controller let storage send in data/sample/checkpoint-burst, over the ops and the queue](../../docs/figures/valves-reactive-checkpoint-burst.svg)
#
# *A static copy from `docs/figures/` (its first 5 s rather than 3), drawn from the same
# sample by `make samples`: what shows where this notebook is read without a kernel.*

# %% [markdown]
# ## 2. What a controller sees and does
#
# A controller is a class derived from `labkit.control.Controller`. labkit calls its
# `step(self, now_ns)` every 10 ms (`control.interval_ms`) in a thread of its own;
# `now_ns` is the time in nanoseconds. In `step` you may use:
#
# | name | what it is |
# |---|---|
# | `self.plant.feed.view(now_ns)` | a dict, bottleneck port -> what the telemetry showed 5 ms ago: `.backlog_bytes` (the queue), `.vip_delay_ns` (how long a ring packet would wait in it), `.vip_new_bytes` (ring bytes that arrived since the sample your previous step saw; samples come every 8 ms), `.vip_bytes`, `.t_ns` |
# | `self.plant.spec` | the scenario's knobs: `busy_share` (0.005), `idle_share` (0.98), `interval_ms`, `telemetry_delay_ms`, ... |
# | `self.hold(share, reason)` | set every storage sender's gate to `share` of its fair share of the bottleneck (`busy_share` to hold it, `idle_share` to let it run), with a reason in words: each change is recorded |
#
# The ring's packets are the vip lane (RoCEv2); under these FIFO ports, `vip_delay_ns`
# is simply the whole queue's delay. Things to decide: what tells you the ring has
# started, how quickly you hold storage, and when you let it go again.
#
# ## 3. Your controller
#
# Replace the `raise` with your decision. Keep `name = "mine"`: it is the policy the run
# below names.

# %% tags=["answer"]
class Mine(Controller):
    """Your controller: hold storage back while the ring needs the bottleneck."""

    name = "mine"

    def step(self, now_ns):
        views = self.plant.feed.view(now_ns)  # port -> what the telemetry shows
        raise NotImplementedError("write your controller's decision here")


# %% [markdown]
# ## 4. Rehearsal, no root needed
#
# Before the real thing, your controller runs against a small model of the bottleneck:
# one FIFO port at 100 Mbit/s with a 512 KiB buffer, storage offering 1.2 times that,
# and the ring alternating 300 ms of compute with ops that need the port for 300 ms. Your
# class gets the same telemetry feed and the same calls as in a run, in simulated time.
# The check wants storage held within 50 ms of every op's start (from the second op on:
# a controller may need one to learn) and most of its share back while the ring computes.
# The model is kinder than the fabric, so treat its numbers as a preview only.

# %%
lab.check_rehearsal(Mine)

# %% [markdown]
# ## 5. The real run (needs root)
#
# `checkpoint-burst.yaml` under `reactive` and under your controller, about 6 seconds of
# traffic each, each on a freshly built fabric. Without root it says why and does nothing.

# %% tags=["live"]
run = lab.run_against(Mine)

# %%
lab.check_beats(run)

# %% [markdown]
# ## 6. Look closer
#
# Your controller's decisions over the queue, as for `reactive` above, and the ring's op
# times under both.

# %%
plots.valve_timeline(run, "mine", seconds=3) if run is not None else "no run yet"

# %%
plots.op_time_cdf(run) if run is not None else "no run yet"

# %% [markdown]
# Questions to discuss:
#
# * What does your controller cost storage? Compare `storage_mbps` with reactive's.
# * The feed is 5 ms old and sampled every 8 ms. What is the earliest your controller can
#   react to an op's start? What could it do to act *before* the op starts?
# * labkit's `proactive` learns the ring's rhythm from the telemetry; `state-aware` is
#   told by the job itself when it will communicate. Which information does yours use?
