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
# # 06 · Sharing the fabric: two jobs, one uplink
#
# Notebooks 01 to 03 protect one collective from storage. A real cluster runs many
# training jobs at once, and as soon as two of them cross the same uplink, "put the
# collective in vip" settles nothing: both jobs' All-Reduces are collectives. Someone has
# to decide whose goes first, or how they take turns.
#
# `topologies/two-jobs.yaml` puts two ring All-Reduce jobs on the bottleneck fabric of
# notebook 01, each over two GPU hosts behind each leaf, so both rings cross leaf1's uplink,
# beside the dataset reads. **heavy** is communication-heavy: a large All-Reduce after a
# short compute phase. **light** is compute-heavy: a small All-Reduce after a long one.
# Each job's packets carry a DSCP of its own, so the kernel counts and times the two jobs
# apart at every watched port. The run shipped in `data/sample/two-jobs` went through
# every policy that shares the fabric between jobs:
#
# * `isolated`: each job alone, one after the other: each job's yardstick;
# * `together`: both jobs, no storage; `fifo`: everything in one queue;
# * `fair`: both jobs' All-Reduces in the one vip lane (a single FIFO), storage in low;
# * `job-priority`, after Crux: the job that computes the most per byte it sends (its
#   *GPU intensity*, learned from its iterations while it runs) alone in vip, the other in
#   normal;
# * `job-weights`: HTB shares rather than strict priority, so neither job can starve;
# * `interleave`, after CASSINI: the jobs' iterations put off so that their bursts take
#   turns at the uplink.

# %%
import labkit
from labkit.analysis.frames import jobs_frame
from labkit.runs.rundir import load_run
from labkit.ui import plots, widgets

run = load_run(labkit.sample("two-jobs"))

# %% [markdown]
# One row per policy and job: iteration times, slowdowns against the job alone, the GPUs'
# utilization (the compute share of an iteration; `gpu_utilization_all` is the policy's,
# weighted by each job's GPUs: Crux's score) and the job's share of the bottleneck port.

# %%
jobs_frame(run.summary, digits=2).select(
    "policy", "job", "iterations", "p50_ms", "p99_ms", "slowdown_p50", "slowdown_p99",
    "gpu_utilization", "gpu_utilization_all", "bottleneck_share")

# %% [markdown]
# Under `fair` both jobs wait for each other's bursts in the vip lane, and the GPUs
# compute 53 %<!-- two-jobs policies.fair.jobs.gpu_utilization *100 --> of the time.
# `job-priority` gives light, the more GPU-intense job, the lane to itself: the score
# rises to 65 %<!-- two-jobs policies.job-priority.jobs.gpu_utilization *100 -->, next to
# the 65 %<!-- two-jobs policies.isolated.jobs.gpu_utilization *100 --> the jobs reach each
# alone. heavy pays, but little: its p99 slowdown is
# 1.09<!-- two-jobs policies.job-priority.jobs.each.heavy.slowdown_p99 -->, because light's
# All-Reduce is small and rare. `job-weights` lands in between; `interleave` comes second
# with 62 %<!-- two-jobs policies.interleave.jobs.gpu_utilization *100 -->, the shifted
# job's tail paying for the turns.
#
# ## The bursts at the bottleneck
#
# Each job's rate through the bottleneck port over time, stacked, counted by the kernel
# per job. Under `fair` the two jobs' bursts land together and split the link; under
# `interleave` a job's op is put off (the dotted lines) so that each burst starts after
# the other's ends.

# %%
plots.job_bursts(run, ["fair", "interleave"])

# %% [markdown] tags=["static-figure"]
# ![Each job's rate into the bottleneck port of data/sample/two-jobs, stacked, a panel per policy](../docs/figures/job-bursts-two-jobs.svg)
#
# *A static copy from `docs/figures/` (with every policy under which the kernel counted the
# jobs apart), drawn from the same sample by `make samples`: what shows where this notebook
# is read without a kernel.*

# %% [markdown]
# ## Each job's iterations
#
# The iteration times of each job, a CDF per policy, the job alone dashed. A policy that
# favours one job moves that job's curve onto its dashed one and the other job's to the
# right.

# %%
plots.job_iteration_cdfs(run)

# %% [markdown] tags=["static-figure"]
# ![Each job's iteration-time CDFs in data/sample/two-jobs, a panel per job, a curve per policy](../docs/figures/job-iteration-cdf-two-jobs.svg)
#
# *A static copy from `docs/figures/`, drawn from the same sample by `make samples`: what
# shows where this notebook is read without a kernel.*

# %% [markdown]
# Explore the recorded run, no root needed: pick policies, and both figures and their
# tables follow (the bursts only for the policies under which both jobs ran together).

# %%
widgets.jobs_explorer(run)

# %% [markdown] tags=["static-figure"]
# ![Each job's iteration-time CDFs in data/sample/two-jobs, a panel per job, a curve per policy](../docs/figures/job-iteration-cdf-two-jobs.svg)
#
# ![Each job's rate into the bottleneck port of data/sample/two-jobs, stacked, a panel per policy](../docs/figures/job-bursts-two-jobs.svg)
#
# *The explorer as it opens, as static copies from `docs/figures/` (drawn from the same
# sample by `make samples`), for reading without a kernel.*

# %% [markdown]
# ## Try it
#
# With root, `labkit run topologies/two-jobs.yaml` records the same run on your machine
# (`labkit report` prints its per-job table). Lab 5 (`notebooks/labs`) asks students to
# predict the winner before measuring and to work out each job's GPU intensity from the
# scenario file.
