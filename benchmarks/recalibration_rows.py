"""How many training rows the batch-norm statistics of a masked network need (``prune.recalibrate_batches``).

torchvision's ``resnet18(num_classes=10)`` trained plainly (Adam 1e-3, batches of 64, ``--epochs``) on
scikit-learn's digits as 3x32x32 images (each 8x8 pixel repeated 4x4, the grey level in all three
channels; 1437 training and 360 test rows), then at each sparsity the fraction of all weights of
smallest magnitude zeroed (one global ranking) and its test error printed with the dense network's
statistics (``stale``) and with statistics re-estimated by :func:`bayesprune.core.normalization.recalibrate`
on B batches of 128 training rows, for five calibration subsets (seeds 0-4) of each B; at 12 or more
batches every training row is read and there is one subset.

    OMP_NUM_THREADS=1 python benchmarks/recalibration_rows.py [--epochs 4] [--batches 2 4 8 20]
"""

import argparse
import copy
import json

import torch
import torch.nn.functional as F
import torchvision

from bayesprune.core.normalization import recalibrate
from bayesprune.data import load_dataset


def images(x):
    return x.reshape(-1, 1, 8, 8).repeat_interleave(4, 2).repeat_interleave(4, 3).expand(-1, 3, -1, -1).contiguous()


def error(net, x, y) -> float:
    with torch.no_grad():
        return 100.0 * (net.eval()(x).argmax(-1) != y).float().mean().item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 4, 8, 20])
    parser.add_argument("--sparsities", type=float, nargs="+", default=[0.5, 0.75, 0.85, 0.9])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = load_dataset("digits")
    x_train, y_train, x_test, y_test = images(data.x_train), data.y_train, images(data.x_test), data.y_test
    net = torchvision.models.resnet18(weights=None, num_classes=10)
    optimizer = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(args.epochs):
        net.train()
        for index in torch.randperm(len(x_train)).split(64):
            optimizer.zero_grad()
            F.cross_entropy(net(x_train[index]), y_train[index]).backward()
            optimizer.step()
    print(json.dumps({"dense": error(net, x_test, y_test)}), flush=True)
    magnitudes = torch.cat([p.detach().abs().flatten() for p in net.parameters() if p.dim() > 1])
    for sparsity in args.sparsities:
        threshold = magnitudes.kthvalue(int(sparsity * len(magnitudes))).values
        masked = copy.deepcopy(net)
        with torch.no_grad():
            for param in masked.parameters():
                if param.dim() > 1:
                    param.mul_((param.abs() > threshold).to(param.dtype))
        row = {"droprate": sparsity, "stale": error(masked, x_test, y_test)}
        for batches in args.batches:
            subsets = range(5) if batches * 128 < len(x_train) else [0]
            row[f"batches_{batches}"] = [
                round(error(recalibrate(copy.deepcopy(masked), x_train, batches=batches, seed=seed), x_test, y_test), 2)
                for seed in subsets
            ]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
