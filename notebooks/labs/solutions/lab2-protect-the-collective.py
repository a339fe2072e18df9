# Instructor's answers for lab2-protect-the-collective: each cell replaces the lab's answer
# cells (tagged "answer") in order.

# %% tags=["answer"]
# RoCEv2 first, into vip; NVMe/TCP by its port on either side (data from the server and
# commands to it) into low
LANES = {"vip": [{"roce": True}], "low": [{"tcp_port": 4420}]}
