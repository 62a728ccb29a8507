"""The λ learning-rate search behind the packaged PFT configs (issue 27), on MNIST's held-out split.

Trains LeNet-300-100 on the first 50,000 training images (SGD 0.01, momentum 0.9, batches of 128,
30 epochs; saved to ``--pretrained`` and reused), takes the one-shot mask of ``--crit`` at ``--s``,
trains λ (block-isotropic start, eq. 6, clamp, β = 0.5) and W through the Concrete relaxation for
``--epochs`` epochs with λ at ``--mlr``, fine-tunes the sparse network ``--ft`` epochs and prints one
JSON line: the validation error (last 10,000 training images, ``data.validation = true``) of PFT,
of the one-shot mask fine-tuned ``--ft`` epochs and ``--ft + --epochs`` epochs, and the mask overlap.
The test split is never read. The loop is PFT's mask stage written out with the library's pieces
(``StochasticMasks``, ``apply_masks``, ``prune``), so that one pre-training serves every setting.

    OMP_NUM_THREADS=1 python benchmarks/pft_mask_lr.py --crit snip --s 0.95 --epochs 5 --ft 5 --mlr 2
"""

import argparse
import json
import time
from pathlib import Path

import torch
from torch.func import functional_call

from bayesprune.core.criteria import saliency
from bayesprune.core.export import mask_parameters, unmask_parameters
from bayesprune.core.gates import StochasticMasks, block_isotropic, isotropic
from bayesprune.core.pruning import Budget, apply_masks, prune
from bayesprune.data.mnist import load_mnist
from bayesprune.methods.pft import mask_overlap
from bayesprune.models import lenet_300_100

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--crit", default="magnitude")
p.add_argument("--s", type=float, default=0.95)
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--mlr", type=float, default=None)
p.add_argument("--param", default="clamp")
p.add_argument("--eps", type=float, default=1e-4)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--init", default="block")
p.add_argument("--noweights", action="store_true")
p.add_argument("--temp", type=float, default=0.5)
p.add_argument("--ft", type=int, default=0)
p.add_argument("--pretrained", default="pft_mask_lr_pretrained.pt")
a = p.parse_args()
torch.set_num_threads(1)
d = load_mnist(validation=True)
x, y = d.x_train, d.y_train
loss = lambda o, t: torch.nn.functional.cross_entropy(o, t)  # noqa: E731


def train_dense(net, epochs):
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 128):
            idx = perm[i : i + 128]
            batch_loss = loss(net(x[idx]), y[idx])
            opt.zero_grad()
            batch_loss.backward()
            opt.step()


def pretrained():
    torch.manual_seed(0)
    net = lenet_300_100((1, 28, 28), 10)
    if not Path(a.pretrained).exists():
        train_dense(net, 30)
        torch.save(net.state_dict(), a.pretrained)
    net.load_state_dict(torch.load(a.pretrained))
    return net


net = pretrained()
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
rows = torch.randperm(len(d.x_train), generator=g)[:1000]
scores = saliency(a.crit, net, x=d.x_train[rows], y=d.y_train[rows], loss=loss, generator=g)
start = prune(scores, Budget(sparsity=a.s))
init = block_isotropic(scores, a.s, a.eps) if a.init == "block" else isotropic(scores, a.s)
masks = StochasticMasks(init, parameterization=a.param, temperature=a.temp)
groups = [{"params": masks.parameters(), "lr": a.mlr or a.lr}]
if not a.noweights:
    groups.append({"params": net.parameters(), "lr": a.lr})
opt = torch.optim.SGD(groups, lr=a.lr, momentum=0.9)


def err(n, m=None):
    with torch.no_grad():
        params = dict(n.named_parameters())
        if m is not None:
            params = apply_masks(params, m)
        return (functional_call(n, params, (d.x_test,)).argmax(1) != d.y_test).float().mean().item()


def status(tag):
    params = dict(net.named_parameters())
    ranks = masks.ranks({s: params[s].abs() for s in masks.sites})
    end = prune(ranks, Budget(sparsity=a.s))
    lam = torch.cat([p.detach().flatten() for p in masks.keep_probabilities()])
    st = torch.cat([start[s].flatten() for s in masks.sites])
    out = dict(
        tag=tag,
        overlap=round(mask_overlap(start, end), 4),
        esp=round(masks.expected_sparsity(), 4),
        lam_kept_mean=round(lam[st].mean().item(), 4),
        lam_pruned_mean=round(lam[~st].mean().item(), 5),
        n_pruned_gt_half=int((lam[~st] > 0.5).sum()),
        n_kept_lt_half=int((lam[st] < 0.5).sum()),
        frac_exact01=round(((lam == 0) | (lam == 1)).float().mean().item(), 4),
        err_end=round(err(net, end), 4),
        err_start=round(err(net, start), 4),
    )
    print(json.dumps(out), flush=True)
    return end


status("init")
for e in range(a.epochs):
    t = time.time()
    perm = torch.randperm(len(x), generator=g)
    for i in range(0, len(x), 128):
        idx = perm[i : i + 128]
        params = {n: (p if not a.noweights else p.detach()) for n, p in net.named_parameters()}
        batch_loss = loss(functional_call(net, apply_masks(params, masks.relaxed()), (x[idx],)), y[idx])
        opt.zero_grad()
        batch_loss.backward()
        opt.step()
    end = status(f"epoch {e + 1} {time.time() - t:.1f}s loss {batch_loss.item():.3f}")


def finetune(n, m, epochs):
    mask_parameters(n, m)
    o = torch.optim.SGD(n.parameters(), lr=a.lr, momentum=0.9)
    gg = torch.Generator().manual_seed(1)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gg)
        for i in range(0, len(x), 128):
            idx = perm[i : i + 128]
            batch_loss = loss(n(x[idx]), y[idx])
            o.zero_grad()
            batch_loss.backward()
            o.step()
    unmask_parameters(n)
    return err(n)


if a.ft:
    pft = finetune(net, end, a.ft)
    osp = pretrained()
    o1 = finetune(osp, start, a.ft)
    o2 = finetune(osp, start, a.epochs)
    print(
        json.dumps(
            dict(
                final=1,
                crit=a.crit,
                s=a.s,
                mlr=a.mlr,
                pft_val=pft,
                osp_val=o1,
                osp_equal_val=o2,
                overlap=mask_overlap(start, end),
            )
        ),
        flush=True,
    )
