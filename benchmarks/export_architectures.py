"""Unit-level export of twelve torchvision architectures: parameters and MACs before and after, and
the exported network's output against the masked network's.

What is run: each architecture with random weights (seed 0, :func:`randomised`) and 10 classes, at a
small input size;
a global unit budget (``Budget(level="unit", sparsity=...)``, the default per-layer floor ``min_keep``)
on magnitude scores (|w|; a unit's score is the mean over its incoming weights, a head's over its
query, key and value rows) removes units through :func:`bayesprune.core.export.export`, which checks
the smaller network against the masked one. The table gives parameters, MACs
(:func:`~bayesprune.core.export.count_macs`) and the largest difference of the outputs on 8 random
inputs (the masked network: the dense one with the removed units' weights zeroed,
:func:`~bayesprune.core.pruning.expand_unit_masks`). A network Torch-Pruning cannot trace prints its
one-line refusal.

Usage: ``python benchmarks/export_architectures.py [--fraction 0.5] [--only resnet18 vit]``.
"""

import argparse
import time

import torch
import torchvision

from bayesprune.core.export import count_macs, count_parameters, export
from bayesprune.core.pruning import Budget, apply_masks, expand_unit_masks, prune

MODELS = torchvision.models
#: name → (builder, input shape): 32 x 32 where the network runs at it, 64 x 64 for SqueezeNet and
#: ShuffleNet (their pooling needs it).
ARCHITECTURES = {
    "resnet18": (lambda: MODELS.resnet18(num_classes=10), (3, 32, 32)),
    "resnet50": (lambda: MODELS.resnet50(num_classes=10), (3, 32, 32)),
    "mobilenet_v2": (lambda: MODELS.mobilenet_v2(num_classes=10), (3, 32, 32)),
    "mobilenet_v3_small": (lambda: MODELS.mobilenet_v3_small(num_classes=10), (3, 32, 32)),
    "vgg11_bn": (lambda: MODELS.vgg11_bn(num_classes=10), (3, 32, 32)),
    "densenet121": (lambda: MODELS.densenet121(num_classes=10), (3, 32, 32)),
    "efficientnet_b0": (lambda: MODELS.efficientnet_b0(num_classes=10), (3, 32, 32)),
    "shufflenet_v2_x0_5": (lambda: MODELS.shufflenet_v2_x0_5(num_classes=10), (3, 64, 64)),
    "regnet_x_400mf": (lambda: MODELS.regnet_x_400mf(num_classes=10), (3, 32, 32)),
    "convnext_tiny": (lambda: MODELS.convnext_tiny(num_classes=10), (3, 32, 32)),
    "squeezenet1_0": (lambda: MODELS.squeezenet1_0(num_classes=10), (3, 64, 64)),
    "vit": (
        lambda: MODELS.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
        ),
        (3, 32, 32),
    ),
}


def randomised(net):
    """``net`` with torchvision's constant initial values redrawn, so that no channel, layer scale or
    classifier starts as a copy of another or at zero and the comparison sees every unit: each
    parameter whose entries are all equal (batch-norm weights and biases, ConvNeXt's layer scale of
    1e-6, the ViT's zero classifier and class token) from U(0.5, 1.5), batch-norm running means from
    N(0, 0.1²) and running variances from U(0.5, 1.5)."""
    with torch.no_grad():
        for param in net.parameters():
            if bool((param == param.flatten()[0]).all()):
                param.uniform_(0.5, 1.5)
        for module in net.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return net


def walk(name, fraction) -> dict:
    build, shape = ARCHITECTURES[name]
    torch.manual_seed(0)
    net = randomised(build()).eval()
    start = time.perf_counter()
    row = {"name": name, "input": "x".join(map(str, shape[1:])), "params": count_parameters(net)["total"]}
    row["macs"] = count_macs(net, shape)
    scores = {site: param.detach().abs() for site, param in net.named_parameters() if param.dim() > 1}
    try:
        masks = prune(scores, Budget(level="unit", sparsity=fraction), net=net, input_shape=shape)
        small = export(net, masks, input_shape=shape)
    except ValueError as error:
        return {**row, "refused": str(error)}
    x = torch.randn(8, *shape, generator=torch.Generator().manual_seed(1))
    weights = apply_masks(dict(net.named_parameters()), expand_unit_masks(net, masks, input_shape=shape))
    with torch.no_grad():
        masked = torch.func.functional_call(net, weights, (x,))
        difference = (small(x) - masked).abs().max().item()
    return {
        **row,
        "units": f"{sum(int(m.sum()) for m in masks.values())}/{sum(m.numel() for m in masks.values())}",
        "params_after": count_parameters(small)["total"],
        "macs_after": count_macs(small, shape),
        "difference": difference,
        "scale": masked.abs().max().item(),
        "seconds": time.perf_counter() - start,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.5, help="fraction of all units removed (global)")
    parser.add_argument("--only", nargs="+", choices=sorted(ARCHITECTURES), help="architectures to walk")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| network | input | units kept | parameters | MACs | max abs difference (output scale) |")
    print("|---|---|---|---|---|---|")
    for name in args.only or ARCHITECTURES:
        row = walk(name, args.fraction)
        if "refused" in row:
            print(f"| {name} | {row['input']} | refused: {row['refused']} | {row['params'] / 1e6:.3f}M | | |")
            continue
        print(
            f"| {name} | {row['input']} | {row['units']} | {row['params'] / 1e6:.3f}M → {row['params_after'] / 1e6:.3f}M "
            f"| {row['macs'] / 1e6:.2f}M → {row['macs_after'] / 1e6:.2f}M | {row['difference']:.1e} ({row['scale']:.1e}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
