"""torchvision's classification builders, random weights, through ``bayesprune run`` as a new user writes it.

The whole list is walked by ``benchmarks/torchvision_walk.py`` (minutes); here, a subset that covers
what broke or could: SqueezeNet (no Linear layer at all: its classifier is a convolution) and ShuffleNet
(channel shuffle, concatenations) from the command line, each one epoch of sBNN and of sparse VD; MNASNet,
whose ``_load_from_state_dict`` reads the state dict's version metadata, through ``fitted.network()`` (what
the run's pruning curve and export load) for both methods. ``test_attention_sites`` runs a ViT.
"""

import json
import sys
from pathlib import Path

import pytest
import torch
import torchvision

import bayesprune as bp
from bayesprune.models.architectures import build_from_factory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from torchvision_walk import SKIPPED, run_one  # noqa: E402

SUBSET = ["squeezenet1_1", "shufflenet_v2_x0_5"]


@pytest.mark.parametrize("method", ["sbnn", "sparse-vd"])
def test_network_keeps_the_version_metadata_a_torchvision_module_reads(method):
    """``fitted.network()`` of an MNASNet: loading the point estimate with a plain dict dropped the
    version metadata, and MNASNet refuses a state dict without it; the network must predict what the
    fit predicts."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 32, 32), torch.arange(8) % 3
    options = {"predictive_samples": 1, **({"kl_anneal_start": 0, "kl_anneal_end": 1} if method == "sparse-vd" else {})}
    fitted = bp.fit_method(
        method,
        torchvision.models.mnasnet0_5(num_classes=3),
        (x, y),
        options=options,
        epochs=1,
        batch_size=8,
        device="cpu",
    )
    plain = fitted.network().eval()
    with torch.no_grad():
        expected = torch.softmax(plain(x), -1)
    assert torch.allclose(fitted.predict(x), expected, atol=1e-5)


def test_an_mnasnet_run_exports_and_reloads(tmp_path, monkeypatch, capsys, method="sparse-vd"):
    """The reported case: a torchvision MNASNet run could not be exported or reloaded (``checkpoint.pt: does not
    match config.toml (version should be set to 1 or 2 instead of None)``): the state dict loaded from the
    checkpoint had no version metadata. The run exports, and the file computes the reloaded network."""
    from bayesprune.cli import main
    from bayesprune.pipeline.rundir import load_run

    monkeypatch.syspath_prepend(str(tmp_path))
    status, err, out = run_one(tmp_path, "mnasnet0_5", method, 32)
    assert status == 0, err
    _, dataset, fitted = load_run(out)
    assert main(["export", str(out), "--out", str(tmp_path / "net.pt2"), "--repeats", "1"]) == 0, capsys.readouterr()
    program = torch.export.load(str(tmp_path / "net.pt2")).module()
    with torch.no_grad():
        x = dataset.x_test[:4]
        assert torch.allclose(program(x), fitted.network().eval()(x), atol=1e-4)


def test_a_factory_network_with_auxiliary_classifiers_trains_on_its_main_logits(tmp_path, monkeypatch):
    """GoogLeNet returns its auxiliary classifiers' logits beside the main ones in training mode, which
    failed every run in its loss; from a factory it returns the main logits alone, the same numbers."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "auxnets.py").write_text(
        "import torchvision\n\n\ndef googlenet(input_shape, output_dim):\n"
        "    return torchvision.models.googlenet(weights=None, num_classes=output_dim)\n"
    )
    net = build_from_factory("auxnets:googlenet", (3, 32, 32), 3).train()
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(0)  # the same dropout draws in both passes
    logits = net(x)
    net._forward_hooks.clear()
    torch.manual_seed(0)
    outputs = net(x)
    assert type(outputs).__name__ == "GoogLeNetOutputs" and torch.equal(logits, outputs.logits)


@pytest.mark.parametrize("name", SUBSET)
def test_a_torchvision_builder_runs_one_epoch_of_sbnn_and_sparse_vd_from_the_command_line(name, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for method in ("sbnn", "sparse-vd"):
        status, err, out = run_one(tmp_path, name, method, 32)
        assert status == 0, err
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["method"] == method and 0 <= metrics["test_error"] <= 100


def test_the_walk_covers_every_classification_builder_but_the_largest():
    """The benchmark walks the list torchvision publishes; what it skips exists and is named with a reason."""
    names = torchvision.models.list_models(module=torchvision.models)
    assert set(SKIPPED) <= set(names) and all(SKIPPED.values())
    assert set(SUBSET) <= set(names)
