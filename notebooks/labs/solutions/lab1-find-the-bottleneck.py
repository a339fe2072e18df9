# Instructor's answers for lab1-find-the-bottleneck: each cell replaces the lab's answer
# cells (tagged "answer") in order.

# %% tags=["answer"]
# spine1's port towards leaf1: st1's reads (120 Mbit/s) and the ring's hop g8 -> g1
# (100 Mbit/s) both arrive from the 1000 Mbit/s side and leave through 100 Mbit/s
QUEUE_AT = ("spine1", "leaf1")

# %% tags=["answer"]
# 1024 KiB x 8 bits / 100 Mbit/s
FULL_QUEUE_MS = 1024 * 1024 * 8 / 100e6 * 1e3

# %% tags=["answer"]
# vip (the ring) is always sent first; storage's NVMe/TCP rides low and waits
WHO_WAITS = "low"
