"""``job-weights`` as a feature of a policy's stack: each job a share of the router ports
instead of strict priority, so that no job starves. The ports' ``weights`` layout
(:mod:`labkit.kernel.tc`) gives vip and normal the same HTB priority and half the link
each; the first job's packets go to vip, every other job's to normal (by their DSCPs,
in the classifier), storage to low, which borrows what they leave."""

from __future__ import annotations

from labkit.model.scenario_spec import Policy, Scenario
from labkit.runs.features.base import Feature, Stack
from labkit.runs.features.jobwatch import set_job_lanes


class JobWeights(Feature):
    """The first job in vip, the others in normal, on ports where the two share."""

    @classmethod
    def wanted(cls, sc: Scenario, policy: Policy, telemetry: bool) -> bool:
        return policy.layout == "job-weights"

    def build(self, stack: Stack) -> None:
        first = stack.sc.jobs[0].name
        set_job_lanes(stack, {job.name: "vip" if job.name == first else "normal"
                              for job in stack.sc.jobs})
