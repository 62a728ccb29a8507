"""``bayesprune run`` with unit gates on a timm vision transformer and on a Hugging Face ``transformers`` ViT
(each built from a config by a model factory, random weights, digits' 8x8 images), then ``bayesprune export``
with a unit budget: attention heads leave, the report's "dense" network is the one the factory builds, and the
file's test error is its own. Oracles: the written file run on the test images, Torch-Pruning's parameter and
MAC count of the factory's network and of the trainable file rebuilt from it."""

import json
import sys

import pytest
import torch
import torch_pruning as tp

from bayesprune.cli import main
from bayesprune.core.export import load_trainable
from bayesprune.data import load_dataset
from bayesprune.pipeline.export import Exported

FACTORIES = {
    "timm": """
from timm.models.vision_transformer import VisionTransformer


def vit(input_shape, output_dim, **architecture):  # the digits config's hidden, activation, ... unused
    return VisionTransformer(img_size=input_shape[-1], patch_size=4, in_chans=input_shape[0], embed_dim=32,
                             depth=1, num_heads=4, num_classes=output_dim)
""",
    "transformers": """
from torch import nn
from transformers import ViTConfig, ViTForImageClassification


class Logits(nn.Module):
    def __init__(self, input_shape, output_dim):
        super().__init__()
        config = ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
                           image_size=input_shape[-1], patch_size=4, num_channels=input_shape[0], num_labels=output_dim)
        self.vit = ViTForImageClassification(config)

    def forward(self, x):
        return self.vit(pixel_values=x).logits


def vit(input_shape, output_dim, **architecture):  # the digits config's hidden, activation, ... unused
    return Logits(input_shape, output_dim)
""",
}


@pytest.mark.parametrize("library", FACTORIES)
def test_unit_gates_and_a_unit_export_remove_heads_of_a_library_vit(library, tmp_path, monkeypatch, capsys):
    pytest.importorskip(library)
    module = f"factory_{library}"
    (tmp_path / f"{module}.py").write_text(FACTORIES[library])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    settings = [
        f"model.factory='{module}:vit'",
        "train.epochs=1",
        "unit-gates.finetune_epochs=0",
        "device='cpu'",
        "baseline.enabled=false",
    ]
    sets = [flag for item in settings for flag in ("--set", item)]
    assert main(["run", "unit-gates-digits", "--out", "run", "--quiet", *sets]) == 0
    capsys.readouterr()
    budget = ["--budget", "sparsity=0.5", "--budget", "scope=layer"]  # half of each layer's units: heads too
    assert main(["export", "run", "--out", "small.pt2", *budget, "--json", "--repeats", "1"]) == 0
    report = json.loads(capsys.readouterr().out)

    heads_removed, heads = report["removed_units"]["heads"]
    assert heads == 4 and heads_removed >= 2
    said = Exported(report, compared_inputs=256).summary()[0]
    assert f"removed from the dense network: {heads_removed} of 4 attention heads, " in said
    pruning = (tmp_path / "run" / "report.md").read_text().split("## Pruning by")[1]
    assert "Units (channels, attention heads, hidden neurons) are ranked" in pruning and "set to zero" not in pruning
    factory = sys.modules.get(module) or __import__(module)
    brought = factory.vit((1, 8, 8), 10).eval()
    x = torch.zeros(1, 1, 8, 8)
    assert [report["dense"]["macs"], report["dense"]["parameters"]["total"]] == list(
        tp.utils.count_ops_and_params(brought, x)
    )
    rebuilt = load_trainable("small.trainable.pt", net=factory.vit((1, 8, 8), 10))
    assert [report["exported"]["macs"], report["exported"]["parameters"]["total"]] == list(
        tp.utils.count_ops_and_params(rebuilt, x)
    )
    attention = next(m for m in rebuilt.modules() if hasattr(m, "num_heads") or hasattr(m, "num_attention_heads"))
    assert getattr(attention, "num_heads", getattr(attention, "num_attention_heads", None)) == heads - heads_removed
    assert report["max_abs_difference_to_masked"] < 1e-5

    data = load_dataset("digits")  # the file takes the images as the data files hold them: values 0-16
    with torch.no_grad():
        predicted = torch.export.load("small.pt2").module()(data.raw_x_test).argmax(1)
    assert report["test_error"] == pytest.approx(100 * (predicted != data.y_test).float().mean().item())
