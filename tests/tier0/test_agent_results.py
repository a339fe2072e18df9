"""What the traffic reports (labkit.model.traffic.results): each agent's result file, as
the agents wrote it before it had a type, reads back as its type and writes again byte
for byte; the run reads their attributes into its tables; the users' programs' ends are
written for the summary as they were."""

import json

import pytest

from labkit.model.traffic.results import (
    CollectiveResult,
    CommandEnd,
    EngineResult,
    IoDone,
    OpResult,
    ProgramRankEnd,
    RankCounters,
    Span,
    StorageResult,
)
from labkit.runs import experiment, rundir

OP = {"op": 0, "rank": 1, "start_ns": 100, "end_ns": 900, "wrong": 0, "compute_ns": 300,
      "exposed_ns": 200, "bubble_ns": 50, "resent": 6}
RANK = {"cpu_user_s": 0.25, "cpu_sys_s": 0.5, "rank": 1, "ops": [OP],
        "phases": [[0, "compute", 100, 400], [0, "bubble", 400, 450]], "aborted": False,
        "retransmits": 2, "timeouts": 1, "naks": 0, "cnps": 3, "out_of_order": 4,
        "bytes_received": 65536, "packets_sent": 70}
NEVER_STARTED = {"rank": 1, "ops": [], "phases": [], "aborted": True}
STORAGE = {"samples": {"dataset": [[10, 4096], [60, 8192]]},
           "ios": [["dataset", 5, 1200, 4096]], "aborted": False,
           "errors": [[70, "connection reset"]]}
STORAGE_NEVER_STARTED = {"samples": {}, "ios": [], "aborted": True, "errors": []}


ENGINE = {"ranks": [RANK, NEVER_STARTED]}


@pytest.mark.parametrize("cls, doc", [(CollectiveResult, RANK), (CollectiveResult, NEVER_STARTED),
                                      (EngineResult, ENGINE), (StorageResult, STORAGE),
                                      (StorageResult, STORAGE_NEVER_STARTED)])
def test_every_result_file_reads_back_and_writes_again_byte_for_byte(cls, doc):
    result = cls.from_json(json.loads(json.dumps(doc)))
    assert json.dumps(result.to_json()) == json.dumps(doc)
    assert cls.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_results_are_typed():
    rank = CollectiveResult.from_json(RANK)
    assert rank.ops == (OpResult(**OP),) and rank.phases[1] == Span(0, "bubble", 400, 450)
    assert rank.counters == RankCounters(cpu_user_s=0.25, cpu_sys_s=0.5, retransmits=2,
                                         timeouts=1, naks=0, cnps=3, out_of_order=4,
                                         bytes_received=65536, packets_sent=70)
    assert CollectiveResult.from_json(NEVER_STARTED).counters is None
    storage = StorageResult.from_json(STORAGE)
    assert storage.ios == (IoDone("dataset", 5, 1200, 4096),)
    assert storage.samples == {"dataset": ((10, 4096), (60, 8192))}


class Finished:
    """An agent that has ended: its host and what it reported."""

    def __init__(self, node, result):
        self.node, self._result = node, result

    def result(self):
        return self._result


def test_the_run_reads_the_results_into_its_tables():
    policy = experiment.PolicyResult("fifo", "fifo")
    policy.storage_stopped_ns = 65
    experiment._collect(policy, [("g2", CollectiveResult.from_json(RANK)),
                                 ("g3", CollectiveResult.from_json(NEVER_STARTED))],
                        [Finished("s1", StorageResult.from_json(STORAGE))])
    tables = rundir.tables_from([policy])
    assert tables["collectives"].row(0) == ("fifo", 0, 1, "g2", 100, 900, 0, 300, 200, 50, 6)
    assert tables["phases"]["phase"].to_list() == ["compute", "bubble"]
    transport = tables["transport"].rows()
    assert transport[0] == ("fifo", "g2", 1, 70, 2, 1, 0, 4, 65536, 0.25, 0.5, 3)
    assert transport[1] == ("fifo", "g3", 1, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0)  # never started
    assert policy.aborted
    assert tables["flows"].rows() == [("fifo", "s1", "dataset", 10, 4096),
                                      ("fifo", "s1", "dataset", 60, 8192)]
    assert tables["ios"].rows() == [("fifo", "s1", "dataset", 5, 1200, 4096)]
    assert policy.storage_errors == []  # after storage was stopped: not an error


def test_the_users_programs_ends_are_written_as_before():
    command = CommandEnd(name="bulk", role="serve", host="g2", argv=("iperf3", "-s"), exit=-15,
                         stopped_by_labkit=True)
    assert json.dumps(command.to_json()) == json.dumps(
        {"name": "bulk", "role": "serve", "host": "g2", "argv": ["iperf3", "-s"], "exit": -15,
         "stopped_by_labkit": True})
    rank = ProgramRankEnd(rank=0, host="g1", argv=("python", "train.py"), exit=None,
                          stopped_by_labkit=True, lingered=False, cpu_s=1.5)
    assert json.dumps(rank.to_json()) == json.dumps(
        {"rank": 0, "host": "g1", "argv": ["python", "train.py"], "exit": None,
         "stopped_by_labkit": True, "lingered": False, "cpu_s": 1.5})
