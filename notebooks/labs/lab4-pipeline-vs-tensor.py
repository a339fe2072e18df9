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
# # Lab 4 · Pipeline vs tensor parallelism
#
# *About 45 minutes. No root needed; the optional live run at the end needs it.*
#
# A model too big for one GPU is split across several, and how you split it decides what
# the network carries. **Tensor parallelism** cuts every layer across all GPUs: after each
# layer they all-reduce its activations. **Pipeline parallelism** gives each GPU a run of
# layers (a *stage*): activations flow from stage to stage, micro-batch by micro-batch, and
# gradients flow back. The pipeline talks far less, but its stages wait for each other
# while the pipeline fills and drains: the *bubble*.
#
# Everything here is computed from labkit's own job plans, the same per-rank lists of
# compute phases and messages its agents execute on the emulated fabric, run in virtual
# time. Cells marked *your answer* hold `...`: fill them in, run them, then run the check
# below.

# %%
import polars as pl

from labkit.analysis.frames import summary_frame
from labkit.runs.rundir import load_run
from labkit.ui.labs import parallelism as lab

run = None  # the real run, once its cell (near the end) has run

# %% [markdown]
# ## 1. Two recorded runs
#
# `topologies/tensor-parallel.yaml` and `pipeline-parallel.yaml` train on the same batch
# over the eight GPU hosts of the bottleneck fabric (g1-g4 behind leaf1, g5-g8 behind
# leaf2), with and without storage traffic. Here is what labkit recorded.

# %%
runs = {kind: load_run(lab.SAMPLES / f"{kind}-parallel") for kind in ("tensor", "pipeline")}
pl.concat([summary_frame(run.summary, digits=3).select(
    pl.lit(kind).alias("parallelism"), "policy", "p50_ms", "slowdown_p50", "exposed_comm",
    "bubbles") for kind, run in runs.items()])

# %% [markdown]
# ## 2. Which one loads the uplink?
#
# leaf1's single uplink to spine1 is the fabric's bottleneck. Reading the two job entries
# in the scenario files (`layers`, `activation_bytes`, `microbatches`), which job sends
# more bytes across it per iteration: `"tensor"` or `"pipeline"`?

# %%
for path in (lab.TENSOR, lab.PIPELINE):
    print(path.name, "->", next(line.strip() for line in path.read_text().splitlines()
                                if "kind: job" in line))

# %% tags=["answer"]
# your answer: "tensor" or "pipeline"
MORE_UPLINK_BYTES = ...

# %%
lab.check_more_uplink(MORE_UPLINK_BYTES)

# %% [markdown]
# ## 3. The bubble
#
# Below is one iteration of the pipeline job with 4 micro-batches over 8 stages, as
# labkit's plans run when messages cost nothing. Each bar is a stage computing one
# micro-batch's forward or (twice as long) backward pass; the white space is the bubble.
# The schedule is 1F1B: after a short warm-up each stage alternates one forward and one
# backward. GPipe, the older schedule, runs all forwards first, then all backwards.

# %%
lab.schedule_figure(4, ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"], messages=False)

# %% [markdown]
# Write the textbook formula for the bubble: the fraction of an iteration a stage sits
# idle, for `stages` stages and `microbatches` micro-batches, when messages are free.
# Hint: a stage works on each micro-batch once forward and once backward; the first
# stage's last backward pass cannot start before the pipeline has drained.

# %% tags=["answer"]
def textbook_bubble(stages, microbatches):
    """The fraction of an iteration a pipeline stage is idle."""
    return ...


# %%
lab.check_bubble_formula(textbook_bubble)

# %% [markdown]
# ## 4. Tune the pipeline
#
# Someone set up the job badly: 2 micro-batches, and the stages spread over the leaves in
# alternation (stage 0 on g1, stage 1 on g5, stage 2 on g2, ...). The table shows what an
# iteration costs: its time and idle fraction as the plans run with every message taking
# its time on the wire, the textbook bubble, and the kilobytes crossing leaf1's uplink.

# %%
lab.compare([lab.START])

# %% [markdown]
# Choose the number of micro-batches (the batch stays the same: more micro-batches are
# each smaller) and which host runs each stage (`PLACEMENT[i]` runs stage i), so that
#
# * fewer bytes cross the uplink,
# * the bubble shrinks,
# * and the plans still idle no more than 25 % above the textbook bubble: beyond that,
#   it is no longer the pipeline's fill and drain that you are looking at.
#
# Use `lab.compare([...])` and `lab.schedule_figure(m, placement)` to try candidates
# before you commit.

# %% tags=["answer"]
# your answer: start from the bad setup and improve it
MICROBATCHES = 2
PLACEMENT = ["g1", "g5", "g2", "g6", "g3", "g7", "g4", "g8"]

# %%
lab.compare([lab.START, (MICROBATCHES, PLACEMENT)])

# %%
lab.check_pipeline_choice(MICROBATCHES, PLACEMENT)

# %% [markdown]
# ## 5. Optional: run your pipeline for real (needs root)
#
# This runs your choice on the emulated fabric for about 20 seconds, the job alone
# (`isolated`), and sets the measured iteration beside the plans. labkit measures *idle*
# as the part of a rank's own iteration not spent computing, and splits it into bubbles
# (waiting for a neighbour that had not sent yet) and wire waits (data on its way); ranks
# run one iteration after the other, so its iterations overlap a little. Without root
# it says why and does nothing.

# %% tags=["live"]
run = lab.run_choice(MICROBATCHES, PLACEMENT)

# %%
lab.measured(run)
