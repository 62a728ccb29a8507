"""Predictions of a fitted Bayesian network: the posterior-mean network and the Monte-Carlo predictive."""

from contextlib import contextmanager

import torch

from bayesprune.core.pruning import apply_masks


@contextmanager
def evaluating(net):
    """``net`` in evaluation mode for the block, then back in its mode: batch norm uses its running
    statistics and leaves them as they are (a forward pass in training mode would update them), no dropout."""
    training = net.training
    net.eval()
    try:
        yield net
    finally:
        net.train(training)


#: The :class:`DrawOutputs` being recorded into, innermost last.
_recording = []


@torch.no_grad()
def predict(model, guide, x, *, num_samples: int = 0, masks=None, batch_size: int = 4096):
    """Predictive mean (class probabilities, or regression means in training units).

    Args:
        model: a fitted :class:`bayesprune.models.BayesianNetwork`.
        guide: its guide, providing ``mean_params()`` and ``sample_params()``.
        x: inputs.
        num_samples: 0 evaluates the posterior-mean network (W = m); S > 0 averages the predictive
            mean over S draws W ~ q(W).
        masks: optional pruning masks; masked weights are set to zero in every evaluation.

    One draw is held at a time (drawn, evaluated over ``x`` in chunks of ``batch_size``, dropped), so
    the memory does not grow with S; the evaluations draw nothing, so the draws are those of S
    ``sample_params()`` calls in a row, made by the guide's ``sampler()`` where it has one (which
    computes what the draws share once). Within :meth:`DrawOutputs.recording`, each draw's outputs are kept.
    """
    if num_samples == 0:
        draw = guide.mean_params
    else:
        draw = guide.sampler() if hasattr(guide, "sampler") else guide.sample_params
    total = 0.0
    with evaluating(model.net):
        for index in range(max(num_samples, 1)):
            params = draw()
            params = apply_masks(params, masks) if masks else params
            outputs = [model.network(params, chunk) for chunk in torch.split(x, batch_size)]
            if num_samples > 0 and _recording:
                _recording[-1].add(index, outputs)
            total = total + torch.cat([model.likelihood.mean(output) for output in outputs])
    return total / max(num_samples, 1)


class DrawOutputs:
    """The network's outputs under each Monte-Carlo draw :func:`predict` makes within :meth:`recording`, at
    the first ``rows`` inputs: the pruning curve's draws of the unpruned model, which the posterior
    predictive of ``posterior.nc`` reuses (:func:`bayesprune.analysis.inference_data.to_inference_data`)
    rather than drawing the network and evaluating it again.

    Inputs predicted a batch at a time, each batch from the same state of the generator (the pruning
    curve's streamed test split), give the same draws for every batch: draw ``d``'s outputs are those of
    every batch's ``d``-th draw, in order.
    """

    def __init__(self, rows: int):
        self.rows = rows
        self.draws = []

    @contextmanager
    def recording(self):
        """Record the draws :func:`predict` makes in the block (the innermost recording gets them)."""
        _recording.append(self)
        try:
            yield self
        finally:
            _recording.remove(self)

    def add(self, index: int, outputs: list) -> None:
        """Keep ``outputs`` (draw ``index``'s, chunk by chunk) up to :attr:`rows` inputs in all."""
        if index == len(self.draws):
            self.draws.append([])
        kept = self.draws[index]
        room = self.rows - sum(len(chunk) for chunk in kept)
        for chunk in outputs:
            if room <= 0:
                break
            kept.append(chunk[:room].detach())
            room -= len(kept[-1])

    def outputs(self) -> torch.Tensor | None:
        """The outputs as one tensor, draws × inputs × ..., or ``None`` when nothing was recorded."""
        return torch.stack([torch.cat(chunks) for chunks in self.draws]) if self.draws else None


def metric(task: str, prediction: torch.Tensor, y: torch.Tensor, *, target_std: float = 1.0) -> float:
    """Test error in percent (classification) or RMSE in the targets' original units (regression)."""
    if task == "classification":
        return 100.0 * (prediction.argmax(-1) != y).float().mean().item()
    return target_std * (prediction - y).pow(2).mean().sqrt().item()
