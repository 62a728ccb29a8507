"""``nn.MultiheadAttention``'s query/key/value projections are sites by default, scored and pruned like a
``Linear``'s weights, and ``fit_method`` chooses the sites with ``expose``/``hide`` as a config does."""

import numpy as np
import tomli_w
import torch
from torch import nn
from torchvision.models import VisionTransformer

import bayesprune as bp
from bayesprune.cli import main
from bayesprune.core.sites import site_names
from bayesprune.data import load_dataset
from bayesprune.pipeline.runner import load_run

FACTORY = """
from torchvision.models import VisionTransformer


def vit(input_shape, output_dim):
    return VisionTransformer(image_size=input_shape[-1], patch_size=4, num_layers=1, num_heads=2, hidden_dim=8,
                             mlp_dim=16, num_classes=output_dim)
"""
IN_PROJ = "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"
SHORT = {"sbnn": {"predictive_samples": 1}}


def vit(input_shape=(3, 8, 8), output_dim=10):
    """torchvision's VisionTransformer, one encoder block of two heads on 8x8 images (four patches)."""
    return VisionTransformer(
        image_size=input_shape[-1],
        patch_size=4,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        mlp_dim=16,
        num_classes=output_dim,
    )


def digits(rows: int):
    """The first ``rows`` digits as 3x8x8 images (the grey channel three times)."""
    data = load_dataset("digits")
    return data.x_train[:rows].expand(-1, 3, -1, -1).contiguous(), data.y_train[:rows]


def test_attention_projections_are_sites_of_a_vit_and_of_a_pytorch_encoder_layer():
    assert {IN_PROJ, IN_PROJ.replace("weight", "bias")} <= set(site_names(vit()))
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
    assert site_names(layer) == [
        "self_attn.in_proj_weight",
        "self_attn.in_proj_bias",
        "self_attn.out_proj.weight",
        "self_attn.out_proj.bias",
        "linear1.weight",
        "linear1.bias",
        "linear2.weight",
        "linear2.bias",
    ]
    separate = nn.MultiheadAttention(8, 2, kdim=4, vdim=6)
    assert site_names(separate) == [
        "q_proj_weight",
        "k_proj_weight",
        "v_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ]


def test_a_weight_budget_prunes_the_query_key_value_weights_of_a_fitted_vit():
    """sBNN scores the packed projection weight; half the weights removed globally removes some of its
    entries and keeps others, and the fit's masked prediction is the masked network's, with exactly
    those entries zero (an independent forward pass of the plain network)."""
    torch.manual_seed(0)
    x, y = digits(64)
    fitted = bp.fit_method("sbnn", vit(), (x, y), options=SHORT["sbnn"], epochs=1, batch_size=64, device="cpu")
    assert IN_PROJ in fitted.scores()
    masks = bp.prune(fitted.scores(), bp.Budget(sparsity=0.5))
    assert 0 < int(masks[IN_PROJ].sum()) < masks[IN_PROJ].numel()
    plain = fitted.network().eval()
    with torch.no_grad():
        plain.get_parameter(IN_PROJ).mul_(masks[IN_PROJ])
        for site, mask in masks.items():
            plain.get_parameter(site).mul_(mask)
        expected = torch.softmax(plain(x[:16]), -1)
    assert torch.allclose(fitted.predict(x[:16], masks=masks), expected, atol=1e-5)


def test_fit_method_exposes_and_hides_sites_as_a_config_does(tmp_path, monkeypatch):
    """The same ``expose``/``hide`` from Python and in a TOML config give the same scored sites, and they
    differ from the default ones."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "vits.py").write_text(FACTORY)
    x, y = digits(100)  # every class once at least
    np.savez(tmp_path / "digits.npz", x_train=x.numpy(), y_train=y.numpy(), x_test=x.numpy(), y_test=y.numpy())
    expose, hide = ["LayerNorm"], ["*.in_proj_bias", "heads.*"]
    config = {
        "method": "sbnn",
        "device": "cpu",
        "data": {"dataset": "npz", "path": "digits.npz", "batch_size": 100},
        "model": {"factory": "vits:vit", "expose": expose, "hide": hide},
        "train": {"epochs": 1},
        "sbnn": SHORT["sbnn"],
        "prune": {"sparsities": [0.0]},
        "baseline": {"enabled": False},
    }
    (tmp_path / "vit.toml").write_text(tomli_w.dumps(config))
    assert main(["run", "vit.toml", "--out", "run", "--quiet"]) == 0
    from_config = list(load_run(tmp_path / "run")[2].scores())
    from_python = bp.fit_method(
        "sbnn", vit(), (x, y), options=SHORT["sbnn"], epochs=1, batch_size=100, device="cpu", expose=expose, hide=hide
    )
    assert list(from_python.scores()) == from_config
    assert from_config != site_names(vit()) and "encoder.ln.weight" in from_config and IN_PROJ in from_config
