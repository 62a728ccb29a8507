"""No method's training step reads a value back to the host (issue 51, item 2): on the CPU,
``benchmarks/host_syncs.py``'s :class:`HostReads` counts the calls that would make a CUDA device's host
wait (``item``, ``bool``, ``torch.equal``, a boolean-mask index, a tensor copied from the host, ...)
inside every step of one epoch of each registered method's digits config."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bayesprune.methods import available_methods  # noqa: E402
from host_syncs import HostReads, method_syncs  # noqa: E402

CPU = torch.device("cpu")


def test_host_reads_counts_each_kind_of_read_and_not_the_free_calls():
    x = torch.arange(6.0)
    reads = HostReads()
    with reads:
        x.sum().item()  # 1
        if x.sum() > 0:  # 2: bool
            pass
        x[x > 2]  # 3: a data-dependent shape
        x[x > 2] = 0.0  # 4
        torch.equal(x, x)  # 5
        torch.tensor(1.0, device=x.device)  # 6: host data copied to the (here CPU) device
        # free: no value read, no shape that depends on one
        x.masked_fill(x > 2, 0.0)
        torch.where(x > 2, x, 0.0).sum()
        torch.tensor(1.0)
        x[torch.tensor([0, 2])]
    assert sum(reads.places.values()) == 6
    assert set(reads.places) == {f"{__file__}:{line}" for line in _lines_marked()}


def _lines_marked() -> set:
    source = Path(__file__).read_text().splitlines()
    start = next(i for i, line in enumerate(source) if "x.sum().item()  # 1" in line)
    return {start + 1 + offset for offset in (0, 1, 3, 4, 5, 6)}


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_no_training_step_reads_back_to_the_host(method):
    overrides = ["unit-gates.remove_at='epoch'"] if method == "unit-gates" else []
    counted = method_syncs(method, CPU, 1, overrides)
    assert counted["steps"] > 0
    assert counted["most_syncs_in_a_step"] == 0, counted["where"]


def test_unit_gates_removing_units_at_every_step_reads_one_decision_a_step():
    """remove_at = "step" (paper 004, Algorithm 1) shrinks the network inside the step: whether a unit
    meets the condition is the one value the host reads."""
    counted = method_syncs("unit-gates", CPU, 1)
    assert counted["most_syncs_in_a_step"] == 1
    assert [place.rsplit("/", 1)[-1].split(":")[0] for place in counted["where"]] == ["training.py"]
