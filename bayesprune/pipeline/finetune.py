"""Fine-tuning of a pruned network: trained further by maximum likelihood with the weights pruning removed
held at exactly zero, then its batch-norm statistics estimated again. The run's ``prune.finetune_epochs``
(each point of the pruning curve, and ``bayesprune export``'s network) and compare's magnitude baseline
fine-tune this way."""

import copy
import math
from dataclasses import dataclass, replace

import torch

from bayesprune.core.early_stopping import hold_out
from bayesprune.core.export import mask_parameters, unmask_parameters
from bayesprune.core.layout import resolve_memory_format
from bayesprune.core.normalization import has_running_stats
from bayesprune.core.plain import distillation_objective, fit_plain
from bayesprune.core.predict import metric
from bayesprune.core.tasks import predict_network


def finetune(
    net,
    x,
    y,
    masks: dict,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    calibration=None,
    memory_format: torch.memory_format = torch.contiguous_format,
    objective=None,
):
    """Train ``net`` in place on ``(x, y)`` for ``epochs`` epochs (:func:`~bayesprune.core.plain.fit_plain`:
    Adam at ``lr``, seeded minibatches) with ``masks`` (parameter or ``"<root>.gate"`` → bool, ``True`` = keep)
    fixed by :func:`~bayesprune.core.export.mask_parameters`, so no step moves a removed weight off zero; then,
    with a :class:`~bayesprune.core.normalization.Calibration`, estimate its batch-norm statistics again.
    ``memory_format`` lays out its minibatches of images; ``objective(x, y)`` replaces the mean loss
    (distillation). Returns ``net`` in eval mode."""
    mask_parameters(net, masks)
    if epochs:
        rule = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed, "memory_format": memory_format}
        fit_plain(net, x, y, objective=objective, **rule)
    unmask_parameters(net).eval()
    if calibration is not None:
        calibration.apply(net)
    return net


@dataclass(frozen=True)
class FineTuning:
    """``prune.finetune_epochs`` of a run: ``epochs`` of :func:`finetune` at the run's ``optim.lr`` on
    minibatches of its ``data.batch_size``, seeded by its seed, laid out as its ``train.memory_format``;
    with ``distill`` > 0 (``prune.distill``), knowledge distilled from the network before pruning at
    ``temperature`` (``prune.distill_temperature``; :func:`~bayesprune.core.plain.distillation_objective`).

    ``candidates`` (``prune.finetune_lr``, two or more rates) replaces ``lr`` by a rate chosen on held-out
    training rows: a ``held_out`` fraction of the training split (``prune.finetune_held_out``, drawn with the
    seed, :func:`~bayesprune.core.early_stopping.hold_out`) is set aside, a copy of the network is fine-tuned
    at each rate on the rest, and the copy whose metric on the held-out rows is lowest (the first on a tie)
    is the result (not trained again on every row: the held-out rows are what the choice costs). The test
    split is never read; the batch-norm statistics are estimated on the rest's inputs. The choice is
    returned with the network (``finetune_lr`` and each rate's ``held_out_metrics``)."""

    epochs: int
    lr: float
    batch_size: int
    seed: int = 0
    memory_format: str = "auto"
    distill: float = 0.0
    temperature: float = 4.0
    candidates: tuple = ()
    held_out: float = 0.2

    @classmethod
    def of(cls, config, num_train: int, *, epochs: int | None = None):
        """The fine-tuning ``config`` (a :class:`~bayesprune.pipeline.config.RunConfig`) asks for on a training
        split of ``num_train`` rows (``epochs`` in place of its ``prune.finetune_epochs`` where given), or
        ``None`` (no epochs)."""
        prune = config.prune
        epochs = prune.finetune_epochs if epochs is None else epochs
        if not epochs:
            return None
        batch_size = config.for_data(num_train).data.batch_size
        rates = tuple(prune.finetune_lr or (config.optim.lr,))
        candidates = rates if len(rates) > 1 else ()
        options = {"distill": prune.distill, "temperature": prune.distill_temperature}
        options.update(candidates=candidates, held_out=prune.finetune_held_out)
        return cls(epochs, rates[0], batch_size, config.seed, config.train.memory_format, **options)

    def steps(self, num_train: int) -> int:
        """The optimiser steps of one network's fine-tuning on ``num_train`` training rows (every candidate's,
        on the rows not held out)."""
        if not self.candidates:
            return self.epochs * math.ceil(num_train / self.batch_size)
        rows = num_train - max(1, round(self.held_out * num_train))
        return len(self.candidates) * self.epochs * math.ceil(rows / self.batch_size)

    def apply(self, net, dataset, masks: dict, *, calibration=None, teacher=None) -> tuple:
        """``(network, choice)``: :func:`finetune` ``net`` on ``dataset``'s training split (moved to ``net``'s
        device), its batch-norm statistics estimated again by ``calibration`` where it has any, at ``lr``
        (``net`` itself, trained; ``choice`` ``None``) or at the rate of ``candidates`` chosen on held-out rows
        (the chosen copy; ``choice`` ``{"finetune_lr": rate, "held_out_metrics": {rate: metric}}``). With
        ``distill``, the teacher is ``teacher`` (the dense network, where ``net`` is already smaller), else
        ``net`` as it is given, unmasked."""
        if self.distill:
            teacher = copy.deepcopy(net if teacher is None else teacher)
        if not self.candidates:
            return self._train(net, dataset, masks, self.lr, calibration, teacher), None
        part, x_held, y_held = hold_out(dataset, self.held_out, seed=self.seed)
        if calibration is not None:
            calibration = replace(calibration, inputs=part.x_train)
        best, scores = None, []
        for rate in self.candidates:
            tuned = self._train(copy.deepcopy(net), part, masks, rate, calibration, teacher)
            prediction = predict_network(tuned, x_held.to(next(net.parameters()).device), dataset.task).cpu()
            scores.append(metric(dataset.task, prediction, y_held, target_std=dataset.target_std))
            if scores[-1] < min(scores[:-1], default=math.inf):
                best = tuned
        chosen = self.candidates[scores.index(min(scores))]
        return best, {"finetune_lr": chosen, "held_out_metrics": dict(zip(map(str, self.candidates), scores))}

    def _train(self, net, dataset, masks: dict, lr: float, calibration, teacher):
        device = next(net.parameters()).device
        objective = None
        if self.distill:
            options = {"weight": self.distill, "temperature": self.temperature}
            objective = distillation_objective(net, teacher.to(device), dataset.task, **options)
        return finetune(
            net,
            dataset.x_train.to(device),
            dataset.y_train.to(device),
            masks,
            epochs=self.epochs,
            lr=lr,
            batch_size=self.batch_size,
            seed=self.seed,
            calibration=calibration if has_running_stats(net) else None,
            memory_format=resolve_memory_format(self.memory_format, dataset.input_shape, device),
            objective=objective,
        )

    def test_metric(self, net, dataset, masks: dict, *, calibration=None) -> tuple:
        """``(metric, choice)``: the test metric of ``net`` (a copy is trained) fine-tuned with ``masks`` fixed,
        what each point of the pruning curve reports as ``<metric>_finetuned``, and the rate chosen
        (:meth:`apply`)."""
        tuned, choice = self.apply(copy.deepcopy(net), dataset, masks, calibration=calibration)
        prediction = predict_network(tuned, dataset.x_test, dataset.task).cpu()
        return metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std), choice

    def test_metrics(self, fitted, dataset) -> "FineTunedMetrics":
        """``masks -> metric``: :meth:`test_metric` of ``fitted``'s point network with its calibration
        (:class:`FineTunedMetrics`)."""
        return FineTunedMetrics(self, fitted, dataset)


class FineTunedMetrics:
    """``masks -> metric`` (called): :meth:`FineTuning.test_metric` of ``fitted``'s point network with its
    calibration, each distinct set of masks fine-tuned once (a mask that keeps everything counts as none:
    the pruning curve's sparsity 0 and a MAC target the network already meets are the same fine-tuning);
    :attr:`choices` the rates chosen, one per set of masks fine-tuned, in the order they were."""

    def __init__(self, tuning: FineTuning, fitted, dataset):
        self.tuning, self.fitted, self.dataset = tuning, fitted, dataset
        self.done = {}  # masks (their bytes) -> (metric, choice)

    def __call__(self, masks: dict) -> float:
        key = tuple(
            (site, tuple(mask.shape), mask.cpu().numpy().tobytes())
            for site, mask in sorted(masks.items())
            if not bool(mask.all())
        )
        if key not in self.done:
            network, calibration = self.fitted.network(), self.fitted.calibration
            self.done[key] = self.tuning.test_metric(network, self.dataset, masks, calibration=calibration)
        return self.done[key][0]

    @property
    def choices(self) -> list:
        return [choice for _, choice in self.done.values() if choice is not None]
