# Instructor's answers for lab5-whose-allreduce-is-vip: each cell replaces the lab's answer
# cells (tagged "answer") in order.

# %% tags=["answer"]
# light computes far more per byte it sends, so a millisecond of its All-Reduce waiting
# costs the most GPU time: giving it vip (job-priority) keeps the most GPUs busy, and
# heavy, whose bigger All-Reduce now waits behind light's, pays
BEST_POLICY = "job-priority"
WHO_PAYS = "heavy"

# %% tags=["answer"]
# both rings have two ranks behind each leaf: one hop crosses the uplink each way, and it
# carries 2(n-1)/n x size per iteration (1.5 x size for n = 4); compute_ms in ns over that
n = 4
INTENSITY = {"heavy": 300e6 / (2 * (n - 1) / n * 2 * 2**20),   # ~95 ns per byte
             "light": 425e6 / (2 * (n - 1) / n * 1 * 2**20)}   # ~270 ns per byte

# %% tags=["answer"]
# the more GPU-intense job
FAVOURED = "light"

# %% tags=["answer"]
# from the run being read (the recording, or the live run): the score per policy, and the
# p99 slowdown of the job job-priority put in vip in that run
GPU_UTIL = {p: source.summary.policies[p].jobs.gpu_utilization for p in lab.SHARING}
FAVOURED_P99 = source.summary.policies["job-priority"].jobs.each[
    lab.favoured(source)].slowdown_p99
