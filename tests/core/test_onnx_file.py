"""An ONNX export is quiet: onnxscript's optimiser logs one warning per ``Split`` it leaves unfolded (one per
attention block's packed weight), and :func:`save_onnx` drops those and no other record. Oracle: the same
export through ``torch.onnx`` directly writes them."""

import logging

import pytest
import torch
import torchvision

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from bayesprune.core.export import export, program  # noqa: E402
from bayesprune.core.onnx_file import OPTIMIZER_LOGGER, _without_per_node_messages, run_onnx, save_onnx  # noqa: E402


def vit_without_a_head():
    net = torchvision.models.VisionTransformer(
        image_size=8, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=24, num_classes=3
    ).eval()
    masks = {f"encoder.layers.encoder_layer_{i}.self_attention.gate": torch.tensor([True, False]) for i in range(2)}
    return export(net, masks, input_shape=(3, 8, 8)).eval()


def per_split_messages(caplog) -> int:
    return sum(record.getMessage().startswith("Skipping constant folding for op Split") for record in caplog.records)


def test_the_per_split_messages_are_dropped_and_the_file_runs(tmp_path, caplog):
    net, x = vit_without_a_head(), torch.randn(2, 3, 8, 8)
    with caplog.at_level(logging.WARNING):
        torch.onnx.export(program(net, x), (x,), str(tmp_path / "loud.onnx"), external_data=False, verbose=False)
    assert per_split_messages(caplog) >= 2  # what the exporter writes alone: one per block at least
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        save_onnx(net, tmp_path / "quiet.onnx", x)
    assert per_split_messages(caplog) == 0
    with torch.no_grad():
        assert (run_onnx(tmp_path / "quiet.onnx", [x]) - net(x)).abs().max().item() < 1e-4


def test_other_records_of_the_optimiser_still_reach_the_user(caplog):
    with caplog.at_level(logging.WARNING, logger=OPTIMIZER_LOGGER), _without_per_node_messages():
        logging.getLogger(OPTIMIZER_LOGGER).warning(
            "Skipping constant folding for op %s with multiple outputs.", "Split"
        )
        logging.getLogger(OPTIMIZER_LOGGER).warning("Evaluation failed: %s", "a value of the data")
    assert [record.getMessage() for record in caplog.records] == ["Evaluation failed: a value of the data"]
