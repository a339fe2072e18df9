"""The traffic's model: what the agents (:mod:`labkit.traffic`) send and how, as pure
code: byte layouts (:mod:`.wire`), RoCEv2 and NVMe/TCP templates (:mod:`.roce`,
:mod:`.nvme`), collective algorithms as per-rank steps (:mod:`.schedules`), training jobs'
iterations as plans (:mod:`.jobs`) and those plans in virtual time (:mod:`.timeline`), the
agents' configs (:mod:`.configs`) and the lines a user's program prints (:mod:`.lines`).
"""
