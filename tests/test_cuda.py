"""Every method on a CUDA device (skipped without one; ``pytest -m cuda`` selects these): a short
digits run fits on the GPU, and what it wrote serves a machine without one. Its checkpoint holds CPU
tensors only, the run is read back and exported on the CPU, and the exported network reproduces the
fitted network's masked outputs there."""
import json

import pytest
import torch

from bayesprune.cli import main
from bayesprune.methods import available_methods
from bayesprune.runner import run

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_fits_on_cuda_and_exports_on_cpu(method, short_config, tmp_path, capsys):
    out = tmp_path / "run"
    metrics = run(short_config(method, "device='cuda'", "baseline.enabled=false"), out)
    assert metrics["device"].startswith("cuda")
    saved = torch.load(out / "checkpoint.pt", weights_only=True)  # no map_location: devices as written
    tensors = []

    def collect(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, (dict, list, tuple)):
            for item in value.values() if isinstance(value, dict) else value:
                collect(item)

    collect(saved)
    assert tensors and {tensor.device.type for tensor in tensors} == {"cpu"}

    capsys.readouterr()
    with torch.device("cpu"):
        assert main(["export", str(out), "--out", str(tmp_path / "net.pt2"), "--repeats", "1", "--json"]) in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_difference_to_masked"] < 1e-4
    assert 0.0 <= report["test_error"] <= 100.0  # percent
