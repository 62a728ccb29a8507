"""Checkpoints that load with ``torch.load(weights_only=True)``: tensors and plain metadata only."""
import os

import pyro
import torch


def save_checkpoint(path, *, model, guide, metadata=None):
    """Write the model's and guide's state atomically (a crash never leaves a half-written file)."""
    state = {"model": model.state_dict(), "guide": guide.state_dict(), "metadata": dict(metadata or {})}
    partial = f"{path}.partial"
    torch.save(state, partial)
    os.replace(partial, path)


def load_checkpoint(path, *, model, guide) -> dict:
    """Restore ``model`` and ``guide`` in place from ``path``; returns the saved metadata.

    Entries of Pyro's global param store under the same names are dropped: a ``PyroModule`` adopts
    a stored value over its own on its next call, which would silently undo the load.
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    store = pyro.get_param_store()
    for module, key in ((model, "model"), (guide, "guide")):
        module.load_state_dict(state[key])
        for name, _ in module.named_parameters():
            stored_name = name.removesuffix("_unconstrained")
            if stored_name in store:
                del store[stored_name]
    return state["metadata"]


class Checkpoint:
    """Fit callback that saves a checkpoint after every ``every`` epochs and after the last one."""

    def __init__(self, path, *, model, guide, epochs: int, every: int = 1):
        self.path, self.model, self.guide = path, model, guide
        self.epochs, self.every = epochs, every

    def __call__(self, epoch, history):
        if (epoch + 1) % self.every == 0 or epoch + 1 == self.epochs:
            save_checkpoint(self.path, model=self.model, guide=self.guide, metadata={"epoch": epoch + 1})
