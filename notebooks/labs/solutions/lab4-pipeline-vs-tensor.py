# Instructor's answers for lab4-pipeline-vs-tensor: each cell replaces the lab's answer
# cells (tagged "answer") in order.

# %% tags=["answer"]
# tensor: 2 x 4 layers, each an All-Reduce of 256 KiB over all eight ranks whose ring
# crosses the uplink both ways; pipeline: 256 KiB forward and back over one boundary
MORE_UPLINK_BYTES = "tensor"

# %% tags=["answer"]
def textbook_bubble(stages, microbatches):
    """The fraction of an iteration a pipeline stage is idle."""
    # a stage works m slots of (forward + backward); the iteration lasts m + p - 1 slots
    return (stages - 1) / (microbatches + stages - 1)


# %% tags=["answer"]
# stages in host order: only g4 -> g5 crosses the uplink. 8 micro-batches: the bubble
# falls from 78 % (textbook) to 47 %, and the plans stay within 15 % of the textbook
# (from about 16 micro-batches on, 1F1B's waits for each message take over)
MICROBATCHES = 8
PLACEMENT = ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"]
