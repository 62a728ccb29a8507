"""The thread count a command starts with (bayesprune.pipeline.threads): idle cores less one, at least one;
--threads sets it, validated."""

import pytest
import torch

from bayesprune.cli import main
from bayesprune.pipeline.threads import default_threads, set_threads


@pytest.mark.parametrize(
    "cores, busy, expected", [(2, 0, 1), (2, 1, 1), (1, 0, 1), (16, 0, 15), (16, 1, 15), (16, 3, 13), (16, 40, 1)]
)
def test_the_default_leaves_the_busy_cores_and_one_more(cores, busy, expected):
    assert default_threads(cores, busy) == expected


def test_threads_given_are_set_and_bad_counts_refused_in_one_line(capsys):
    before = torch.get_num_threads()
    try:
        assert set_threads(3) == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    for bad in ("0", "1025", "-2"):
        assert main(["run", "--threads", bad, "--out", "unused"]) == 2
        assert (
            capsys.readouterr().err.strip()
            == f"bayesprune: error: --threads must be an integer from 1 to 1024, got {bad}"
        )
