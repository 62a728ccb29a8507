"""CUDA graphs of a whole training step (``train.graphs``, issue 51, item 3).

A small network's training step on a GPU is a few dozen kernels of microseconds each, and launching them
from the host is most of the step (LeNet-300-100 at batch 128 on an H200: 1.8 ms a step, for
microseconds of arithmetic). A CUDA graph records the step's kernels once and replays them with one
launch. :class:`GraphedStep` does so for a plain optimiser step
(:func:`~bayesprune.core.loop.optimizer_step`: the forward pass, the backward pass and the optimiser's
update, every one of them):

* its first :data:`WARMUP` steps run eagerly on a side stream: they are the stage's real first steps,
  and they set up what a capture cannot (cuBLAS's workspace, the optimiser's state);
* the next step is captured on static input buffers and replayed; every later step copies its
  minibatch (already drawn on the device by :class:`~bayesprune.core.loop.TensorBatches`) into them and
  replays the graph: the parameters, their gradients and the optimiser's state keep their addresses;
* a minibatch of another shape (an epoch's last, smaller one) runs eagerly, and a learning rate the
  schedule changed is captured again (the rate is a constant of the graph): at most one capture an
  epoch, each timed (:attr:`GraphedStep.seconds`, reported by the context at the stage's end);
* Adam and AdamW run with ``capturable=True`` (their step count on the device): the same update to float
  rounding.

Which steps are captured (:func:`graphed`): ``"off"`` none; ``"on"`` every plain optimiser step on a
CUDA device (refused on another device, :func:`check_graphs`); ``"auto"`` those of networks of at most
:data:`AUTO_GRAPH_WEIGHTS` weights on a CUDA device. Any other step (SVI's, a method's own, a run on
several processes) runs eagerly, and so does a step whose capture fails (an operation that reads a value
back to the host or has a data-dependent shape): either is said once, with the reason.
"""

import time
import warnings
from contextlib import contextmanager

import torch

from bayesprune.core import distributed
from bayesprune.core.errors import ConfigError

#: ``train.graphs``'s values.
GRAPH_MODES = ("off", "auto", "on")

#: Eager steps of a stage before its capture.
WARMUP = 3

#: Under ``"auto"``, networks of at most this many weights are captured (a LeNet-300-100 has 266,610,
#: a LeNet-5 431,080; a resnet18's 11 million weights make steps that are not launch-bound).
AUTO_GRAPH_WEIGHTS = 2_000_000


class _Graphs:
    mode = "off"  # outside a training stage


@contextmanager
def graph_mode(mode: str):
    """Run the training loops of the block (:func:`~bayesprune.core.loop.train`) under ``train.graphs = mode``."""
    check_graphs(mode, "cuda")
    previous, _Graphs.mode = _Graphs.mode, mode
    try:
        yield
    finally:
        _Graphs.mode = previous


def check_graphs(mode: str, device: torch.device) -> None:
    """Refuse, before a fit, ``train.graphs = "on"`` on a device that has no CUDA graphs (one line naming the key)."""
    if mode not in GRAPH_MODES:
        raise ConfigError(f"train.graphs must be one of {list(GRAPH_MODES)}, got {mode!r}")
    if mode == "on" and torch.device(device).type != "cuda":
        raise ConfigError(
            f"train.graphs = 'on' needs a CUDA device (CUDA graphs), got device {torch.device(device).type!r}; "
            "use 'auto' (graphs where there is one) or 'off'"
        )


def graphed(step, device: torch.device, stage: str):
    """``step`` as the stage ``stage`` runs it on ``device`` under the current :func:`graph_mode`: a
    :class:`GraphedStep`, or ``step`` itself (off, not CUDA, or a step that is not captured: said once)."""
    mode = _Graphs.mode
    check_graphs(mode, device)
    if mode == "off" or torch.device(device).type != "cuda":
        return step
    reason = _eager_because(step, mode)
    if reason is not None:
        _say(f"train.graphs = {mode!r}: stage {stage!r} runs eagerly: {reason}")
        return step
    return GraphedStep(step, step.optimizer, stage=stage)


def _eager_because(step, mode: str) -> str | None:
    optimizer = getattr(step, "optimizer", None)
    if optimizer is None:
        return "its step is not a plain optimiser step (an SVI step or a method's own; only those are captured)"
    if distributed.launched():
        return "a run on several processes averages its gradients between steps"
    weights = sum(param.numel() for group in optimizer.param_groups for param in group["params"])
    if mode == "auto" and weights > AUTO_GRAPH_WEIGHTS:
        return f"{weights:,} weights (auto captures networks of up to {AUTO_GRAPH_WEIGHTS:,}; 'on' captures any)"
    return None


def _say(message: str):
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class GraphedStep:
    """A plain optimiser step (``step(x, y, index, num_batches)`` with ``step.optimizer``) run as a CUDA
    graph after :data:`WARMUP` eager steps (see the module). After the stage: ``captures`` and their
    ``seconds``, the steps ``replayed``, and those run ``eager`` (the warm-up and other shapes)."""

    def __init__(self, step, optimizer, *, stage: str = "train"):
        self.step, self.optimizer, self.stage = step, optimizer, stage
        for group in optimizer.param_groups:
            if "capturable" in group:  # Adam's and AdamW's step count on the device
                group["capturable"] = True
        self.side = torch.cuda.Stream()
        self.graph = self.inputs = self.loss = self.rates = None
        self.broken = None  # why a capture failed: every step eager from then on
        self.captures, self.seconds, self.replayed, self.eager = 0, 0.0, 0, 0

    def __call__(self, x, y, index, num_batches):
        if self.broken is not None:
            self.eager += 1
            return self.step(x, y, index, num_batches)
        if self.graph is None and self.eager < WARMUP:
            self.eager += 1
            return self._on_side(x, y, index, num_batches)
        rates = [group["lr"] for group in self.optimizer.param_groups]
        if self.graph is not None and (x.shape, y.shape) != tuple(part.shape for part in self.inputs):
            self.eager += 1  # another minibatch size
            return self.step(x, y, index, num_batches)
        if self.graph is None or rates != self.rates:
            if not self._capture(x, y, index, num_batches, rates):
                self.eager += 1
                return self._on_side(x, y, index, num_batches)
        else:
            for static, part in zip(self.inputs, (x, y)):
                static.copy_(part)
        self.graph.replay()
        self.replayed += 1
        return self.loss.clone()

    def _on_side(self, x, y, index, num_batches):
        """An eager step on the side stream (warm-up: what it allocates is not the capture's)."""
        current = torch.cuda.current_stream()
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            loss = self.step(x, y, index, num_batches)
        current.wait_stream(self.side)
        return loss

    def _capture(self, x, y, index, num_batches, rates) -> bool:
        """Record the step on static copies of ``(x, y)`` (not run: the caller replays it); ``False``, said
        once, where the step cannot be captured."""
        start = time.perf_counter()
        self.graph = self.loss = None  # the previous rate's graph and its memory
        self.inputs = (x.clone(), y.clone())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.loss = self.step(*self.inputs, index, num_batches)
        except Exception as error:  # whatever the step does that a capture refuses
            self.broken = " ".join(str(error).split())[:160] or type(error).__name__
            self.graph = self.loss = self.inputs = None
            _say(f"train.graphs: stage {self.stage!r} could not be captured ({self.broken}); it runs eagerly")
            return False
        self.graph, self.rates = graph, rates
        self.captures += 1
        self.seconds += time.perf_counter() - start
        return True

    def summary(self) -> dict:
        """What the stage's graphs did and cost: ``captures``, their ``seconds``, the steps ``replayed``
        and those run ``eager`` (the warm-up, minibatches of another size, all after a failed capture)."""
        return {"captures": self.captures, "seconds": self.seconds, "replayed": self.replayed, "eager": self.eager}


def report(stage: str, summary: dict):
    """Say in one line what the stage's graphs cost (:meth:`GraphedStep.summary`)."""
    _say(
        f"train.graphs: stage {stage!r}: {summary['captures']} capture(s) in {summary['seconds']:.3f} s, "
        f"{summary['replayed']} steps replayed, {summary['eager']} eager (warm-up, minibatches of another size)"
    )
