"""The trained network a structured comparison on Fashion-MNIST starts from, trained as a careful user would:
torchvision resnet18 (``bayesprune.models.vision:classifier``) on 8,000 of the first 10,000 training images as
3x32x32, Adam at 3e-3 annealed to zero by a cosine schedule over ``--epochs``, batch 128; the other 2,000
rows are held out and scored after every epoch (the test split is never read), so that the length is chosen
where the held-out error stops falling. The weights are written for ``model.weights``::

    OMP_NUM_THREADS=1 python benchmarks/fashion_start.py --epochs 15 --out start.pt
    bayesprune compare compare-structured-fashion --out runs/plateau --set model.weights=start.pt \\
        --set model.pretrain_epochs=0 --set optim.lr=0.0001

(docs/comparisons.md, "A start trained to a plateau").
"""

import argparse
import time

import torch

from bayesprune.core.optim import torch_optimizer, torch_scheduler
from bayesprune.models import new_net
from bayesprune.pipeline.checks import load_datasets
from bayesprune.pipeline.config import RunConfig

#: The comparison's data and network (compare-structured-fashion), the optimiser a careful user trains with.
CONFIG = {
    "method": "magnitude",
    "data": {"dataset": "fashion-mnist", "shape": "3x32x32", "limit_train": 10000, "batch_size": 128},
    "model": {"factory": "bayesprune.models.vision:classifier", "network": "resnet18"},
    "optim": {"lr": 3e-3, "schedule": "cosine"},
}


def error(net, x, y) -> float:
    """Test error % of ``net`` (eval mode) on ``(x, y)``, in batches of 500."""
    net.eval()
    with torch.no_grad():
        wrong = sum((net(x[i : i + 500]).argmax(1) != y[i : i + 500]).sum().item() for i in range(0, len(x), 500))
    net.train()
    return 100.0 * wrong / len(x)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--held-out", type=int, default=2000, help="training rows scored, never trained on")
    parser.add_argument("--out", required=True, help="the weights file to write")
    args = parser.parse_args(argv)
    config = RunConfig.from_dict({**CONFIG, "seed": args.seed})
    data = load_datasets(config)[0]
    order = torch.randperm(data.num_train, generator=torch.Generator().manual_seed(1234))
    train, held = order[: -args.held_out], order[-args.held_out :]
    x, y, x_held, y_held = data.x_train[train], data.y_train[train], data.x_train[held], data.y_train[held]
    torch.manual_seed(args.seed)
    net = new_net(config, data.input_shape, data.output_dim, seed=args.seed)
    optimizer = torch_optimizer(config.optim, net.parameters())
    scheduler = torch_scheduler(config.optim, optimizer, epochs=args.epochs)
    shuffle = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        start = time.time()
        for batch in torch.randperm(len(x), generator=shuffle).split(config.data.batch_size):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            optimizer.step()
        scheduler.step()
        print(
            f"epoch {epoch + 1}/{args.epochs}: held-out error {error(net, x_held, y_held):.2f} % ({time.time() - start:.0f} s)"
        )
    torch.save({name: value.detach().cpu() for name, value in net.state_dict().items()}, args.out)


if __name__ == "__main__":
    main()
