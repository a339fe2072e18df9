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
# # Lab 6 · Find the straggler
#
# *About 40 minutes. No root needed: it reads a recorded run.*
#
# A training job that was fast yesterday is slow today, and nothing failed loudly. In a
# fleet that is most often one slow part: a GPU throttled by its heat (a *straggler*), a
# link that lost half its rate, a port that queues. The whole job waits for it, so every
# rank looks slow. In this lab you get a run of a data-parallel job with a fault in it
# that nobody tells you about, and you find it the way an operator does: from what the
# ranks and the fabric recorded. Then you compare with what labkit's own summary blames.
#
# **Play fair.** The run's folder also holds the truth: its `events` table (and the
# scenario file, `topologies/straggler.yaml`, lists them under `events:`). The checks
# grade your answers against it, and nothing stops you from reading it; please don't
# until you have answered, as a real cluster hands you no such table. Section 5 shows it.
#
# Cells marked *your answer* hold `...`: fill them in, run them, then run the check below.

# %%
from labkit.analysis.frames import straggled_ops
from labkit.runs.rundir import load_run
from labkit.ui import plots
from labkit.ui.labs import straggler as lab

run = load_run(lab.SAMPLE)

# %% [markdown]
# ## 1. The job
#
# The fabric is lab 1's (eight GPU hosts, four behind each leaf, leaf1's uplink to spine1
# the slower link), with no storage on it. The job is data-parallel: every iteration each
# rank computes its forward and backward passes, then the eight ranks all-reduce the
# gradients in a ring (`buckets` of them). Here is the scenario, without its fault:

# %%
print(lab.setup())

# %% [markdown]
# ## 2. Predict
#
# Suppose one rank's compute takes longer than the others', by some time X per
# iteration. Its ring neighbours need its part of the gradients to go on, and their
# neighbours need theirs. Before you look at any data:
#
# * whose *bubbles* (time spent waiting for a peer that has not sent yet) grow: the
#   `"straggler"`'s own, only its `"neighbours"`' (the ranks next to it in the ring), or
#   all the `"others"`'?
# * by how much does each iteration of the job grow: `"less"` than X, about the `"same"`
#   as X, or `"n times"` X (once for every rank that waits)?

# %% tags=["answer"]
# your answer: "straggler", "neighbours" or "others"
WHO_WAITS = ...
# your answer: "less", "same" or "n times"
GROWTH = ...

# %%
lab.check_prediction(WHO_WAITS, GROWTH)

# %% [markdown]
# ## 3. Find it
#
# Every iteration of the job, as the ranks recorded it: when it began (seconds after the
# first) and how long it took, from its first rank's start to its last rank's end. Are
# some iterations slower than the rest?

# %%
lab.iterations(run)

# %% [markdown]
# Where each rank's time went, one row per iteration and one column per rank (by its
# host), in ms: computing, waiting in a bubble, and waiting for data on the wire (a slow
# or lossy link shows here). These are the `collectives` table's `compute_ns`,
# `bubble_ns` and `exposed_ns`; the `phases` table holds the same time span by span.

# %%
lab.per_rank(run, "compute")

# %%
lab.per_rank(run, "bubble")

# %%
lab.per_rank(run, "wire")

# %% [markdown]
# And the bottleneck, leaf1's uplink: its port's mean backlog and the packets it dropped
# during each iteration. A job that queues at the bottleneck shows it here.

# %%
lab.bottleneck(run)

# %% [markdown]
# What slowed the job? Its kind: a `"rank"` (a straggler), a `"link"` (a host's link), or
# the `"bottleneck"`; and its name: the host (`"g5"`), or for a link its two ends
# (`"leaf2-g5"`).

# %% tags=["answer"]
# your answer: "rank", "link" or "bottleneck"
KIND = ...
# your answer: a host's name (or a link, "a-b")
WHO = ...

# %%
lab.check_culprit(KIND, WHO)

# %% [markdown]
# During which iterations? Give the first and the last it slowed (the `op` column).

# %% tags=["answer"]
# your answer: iteration numbers
FIRST_OP = ...
LAST_OP = ...

# %%
lab.check_iterations(FIRST_OP, LAST_OP)

# %% [markdown]
# And what did it cost the job, in ms, all those iterations together? Count what each
# slowed iteration took beyond a usual one.

# %% tags=["answer"]
# your answer: milliseconds
LOST_MS = ...

# %%
lab.check_cost(LOST_MS)

# %% [markdown]
# ## 4. What labkit blames
#
# labkit's summary does the same from the same records, never reading the events
# (`culprits`, docs/data-model.md; `labkit report` prints it). It calls an iteration slow
# when it took 1.2 times the job's usual one or more (the usual: its lower quartile),
# and blames, in this order, the bottleneck (if its port dropped or queued more), a rank
# (if its own compute and late start explain at least half of the growth), else a
# host's link (the host whose rank and next rank waited longest on the wire).

# %%
lab.culprits(run)

# %% [markdown]
# Questions to discuss:
#
# * Did labkit name the same culprit and iterations as you? Its `lost_ms` counts each
#   slow iteration against the lower quartile rather than a median: which is the better
#   yardstick when a fault lasts a third of the run?
# * The rank right after the straggler in the ring waited in a bubble for almost exactly
#   the straggler's extra compute; the others waited a little longer. Why?
# * How would this run's tables look if g3's *link* had lost half its rate instead? Which
#   column would grow, and for which ranks? (`data/sample/link-faults` has a ring whose
#   uplink fails, then degrades: notebook 04 shows it.)
# * A straggler that computes twice as long for a whole run makes every iteration slow.
#   Would labkit's rule (1.2 times the lower quartile) still find it? What would you
#   compare with instead?
#
# ## 5. The truth
#
# Now read the run's `events`: what the scenario made happen, and when (seconds after the
# job's first iteration began).

# %%
lab.events(run)

# %% [markdown]
# The job's timeline around the fault: the last iteration before it and the first it
# slowed, each rank's bar split into compute, waits on the wire and bubbles.

# %%
plots.job_timeline(run, straggled_ops(run))

# %% [markdown] tags=["static-figure"]
# ![g3 computes twice as long; every other rank waits in a bubble](../../docs/figures/job-timeline-straggler.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*
