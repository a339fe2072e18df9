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
# # Lab 5 · Whose All-Reduce is vip?
#
# *About 45 minutes. No root needed; the optional live run (about two minutes) needs it.*
#
# Lab 2 put the collective in the vip lane and storage below it. A cluster runs many jobs,
# though, and when two of them cross the same uplink, both their All-Reduces are
# collectives: if both ride vip, they queue behind each other in it, and priority has
# nothing left to sort. Someone has to decide how the two jobs share the link. In this lab
# you predict which way of sharing it keeps the most GPU time busy, work out from the
# scenario file which job a GPU-aware scheduler would favour, and then read the answer off
# a real run.
#
# Cells marked *your answer* hold `...`: fill them in, run them, then run the check below.

# %%
import yaml

from labkit.ui.labs import sharing as lab

run = None  # your own run, once the live cell (section 4) has run

# %% [markdown]
# ## 1. Two jobs on one uplink
#
# `topologies/two-jobs.yaml` is lab 1's fabric with two training jobs on it. Each job is a
# ring All-Reduce over four GPU hosts, two behind each leaf, so both rings cross leaf1's
# single uplink to spine1, both ways; st1's dataset reads to g1-g4 cross it too (in the
# low lane, whatever the policy). Each iteration, a job computes for `compute_ms`, then
# all-reduces `size_bytes` of gradients. Every packet of a job carries a DSCP of its own,
# so the kernel can tell the jobs apart.

# %%
print(yaml.safe_dump({"traffic": yaml.safe_load(lab.SCENARIO.read_text())["traffic"]},
                     sort_keys=False, width=120))

# %%
lab.jobs()

# %% [markdown]
# ## 2. Predict
#
# Four ways to share the uplink between the jobs, each enforced in the kernel:
#
# * `fair`: both jobs' All-Reduces in the one vip lane, a single FIFO: a burst waits for
#   whatever the other job already queued.
# * `job-priority`, after Crux (SIGCOMM'24): labkit learns each job's *GPU intensity*
#   while the jobs run and puts the most intense job alone in vip, the other one in
#   normal (strict priority: normal sends only when vip has nothing).
# * `job-weights`: HTB shares instead of strict priority: each job is guaranteed part of
#   the link and may borrow the rest, so neither can starve.
# * `interleave`, after CASSINI (NSDI'24): the jobs' iterations are shifted in time so
#   their bursts take turns at the uplink instead of meeting there.
#
# The score is Crux's: **summed GPU utilization**, each job's compute share of its
# iterations, weighted by its GPUs and added up. Before you measure anything: which
# policy scores best, and which job pays for it (its iterations slow down the most
# against running alone)?

# %% tags=["answer"]
# your answer: one of "fair", "job-priority", "job-weights", "interleave"
BEST_POLICY = ...
# your answer: "heavy" or "light"
WHO_PAYS = ...

# %%
lab.check_prediction(BEST_POLICY, WHO_PAYS)

# %% [markdown]
# ## 3. GPU intensity
#
# Crux ranks jobs by GPU intensity: how much compute a job does per byte it sends across
# the shared link. A job that computes a lot and sends little loses a lot of GPU time for
# every millisecond its small All-Reduce waits; holding it back frees little of the link
# for anyone else.
#
# Work it out for both jobs from the table in section 1, in **nanoseconds of compute per
# byte** the job sends across leaf1's uplink in one direction per iteration. A ring
# All-Reduce of n ranks has each rank send 2(n-1) chunks of size/n to its neighbour: the
# reduce-scatter, then the all-gather. Which ranks' hops cross the uplink, and how many
# bytes does each carry?

# %% tags=["answer"]
# your answer: ns of compute per byte across the uplink (one way), per job
INTENSITY = {"heavy": ..., "light": ...}

# %%
lab.check_intensity(INTENSITY)

# %% [markdown]
# Which job's All-Reduce would `job-priority` put alone in vip?

# %% tags=["answer"]
# your answer: "heavy" or "light"
FAVOURED = ...

# %%
lab.check_favoured(FAVOURED)

# %% [markdown]
# `job-priority` knew nothing of the scenario file: it learned each job's intensity from
# the compute time the job's engine reported at the end of each iteration and the bytes
# the kernel counted for the job's DSCP at the bottleneck port. Its rankings in the
# recorded run (every ranking that changed a lane):

# %%
lab.rankings(lab.SAMPLE)

# %% [markdown]
# ## 4. Measure
#
# `data/sample/two-jobs` is a recorded run of this scenario under every policy. If your
# kernel runs as root (or your instructor runs `labkit serve`), the next cell records
# your own run instead: each job alone (`isolated`, the yardstick for slowdowns), then
# the four policies. Without either, it says why and does nothing, and the rest of the
# lab reads the recording.

# %% tags=["live"]
run = lab.run_live()

# %%
source = lab.source(run)
lab.table(source)

# %% [markdown]
# `gpu_utilization` is one job's compute share of its iterations; `gpu_utilization_all`
# is the policy's score, over both jobs. `slowdown_p99` is a job's 99th percentile
# iteration time over its time alone. Read off (from the table, or from
# `source.summary.policies[policy].jobs`, whose `gpu_utilization` is the score and whose
# `each[job]` holds each job's figures) the score of each of the four policies, as a
# fraction, and the p99 slowdown of the job `job-priority` favoured, under `job-priority`.

# %% tags=["answer"]
# your answer: the summed GPU utilization (a fraction) of each policy, and a slowdown
GPU_UTIL = {"fair": ..., "job-priority": ..., "job-weights": ..., "interleave": ...}
FAVOURED_P99 = ...

# %%
lab.check_utilization(GPU_UTIL, source)

# %%
lab.check_favoured_slowdown(FAVOURED_P99, source)

# %% [markdown]
# Questions to discuss:
#
# * Compare `job-priority`'s score with `isolated`'s (each job with the fabric to itself).
#   How can two jobs sharing a link come so close to each having it alone?
# * The job left out of vip did not starve here. Why not? What would change if the
#   favoured job sent more, or iterated faster?
# * `interleave` works when the jobs' periods match and their bursts fit in turns. Look
#   at the two jobs' iteration times alone: when would interleaving beat `job-priority`?
# * If both jobs had the same GPU intensity, what would `job-priority` do, and what would
#   you use instead?
