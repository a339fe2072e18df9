# Instructor's answers for lab6-find-the-straggler: each cell replaces the lab's answer
# cells (tagged "answer") in order.

# %% tags=["answer"]
# the ring cannot finish until every rank has sent its part: all the others wait for the
# straggler, side by side, so the iteration grows by its extra compute once
WHO_WAITS = "others"
GROWTH = "same"

# %% tags=["answer"]
# g3's compute doubles (150 -> 300 ms an iteration) while every other rank's bubbles grow
# by about as much; nobody waits longer on the wire and the bottleneck neither queues nor
# drops: a straggler rank
KIND = "rank"
WHO = "g3"

# %% tags=["answer"]
# the rows where g3's compute is 300 ms
compute = lab.per_rank(run, "compute")
slowed = compute.filter(compute["g3"] > 1.5 * compute["g3"].min())["op"]
FIRST_OP, LAST_OP = int(slowed.min()), int(slowed.max())

# %% tags=["answer"]
# each slowed iteration's time beyond the median of the others, added up (7 x ~140 ms)
ops = lab.iterations(run)
inside = ops["op"].is_between(FIRST_OP, LAST_OP)
LOST_MS = float((ops.filter(inside)["ms"] - ops.filter(~inside)["ms"].median()).sum())
