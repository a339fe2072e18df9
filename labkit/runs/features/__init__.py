"""A policy's stack, feature by feature: what the kernel does for one policy besides the
fabric itself.

A :class:`Feature` is one capability: it says whether a policy wants it
(:meth:`Feature.wanted`), loads what needs no fabric while the fabric is being built
(:meth:`Feature.load`: its BPF objects), then attaches itself to the started fabric
(:meth:`Feature.build`), each in the order of :data:`FEATURES` and seeing the ones
before it; it starts and stops around the traffic, puts its figures into the policy's
result (:meth:`Feature.collect`) and closes. :class:`labkit.runs.experiment.PolicyFabric` is a
loop over them; a new capability is a module of this package (one :class:`Feature`), its
tests, and one line in :data:`FEATURES`.
"""

from __future__ import annotations

from labkit.runs.features.base import F, Feature, Stack, watched_ports
from labkit.runs.features.control import Control
from labkit.runs.features.delays import Delays
from labkit.runs.features.ecn import EcnMarking
from labkit.runs.features.events import Events
from labkit.runs.features.interleave import Interleave
from labkit.runs.features.jobmark import JobMarking
from labkit.runs.features.jobpriority import JobPriority
from labkit.runs.features.jobweights import JobWeights
from labkit.runs.features.lanes import Lanes
from labkit.runs.features.loss import LossyLinks
from labkit.runs.features.pausing import Pausing
from labkit.runs.features.probes import Probes
from labkit.runs.features.routes import Routes
from labkit.runs.features.tcp import TcpControl, dctcp_rows

# the features a policy's stack may have, in the order they are built (each may use the
# ones before it) and started; closed in the reverse order
FEATURES: tuple[type[Feature], ...] = (LossyLinks, TcpControl, EcnMarking, Lanes, Probes,
                                       JobPriority, JobWeights, Interleave, Pausing, Control,
                                       JobMarking, Delays, Routes, Events)

__all__ = ["FEATURES", "Control", "Delays", "EcnMarking", "Events", "F", "Feature",
           "Interleave", "JobMarking", "JobPriority", "JobWeights", "Lanes", "LossyLinks",
           "Pausing", "Probes", "Routes", "Stack", "TcpControl", "dctcp_rows", "watched_ports"]
