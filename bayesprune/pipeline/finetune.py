"""Fine-tuning of a pruned network: trained further by maximum likelihood with the weights pruning removed
held at exactly zero, then its batch-norm statistics estimated again. The run's ``prune.finetune_epochs``
(each point of the pruning curve, and ``bayesprune export``'s network) and compare's magnitude baseline
fine-tune this way."""

import copy
from dataclasses import dataclass

import torch

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
    ``temperature`` (``prune.distill_temperature``; :func:`~bayesprune.core.plain.distillation_objective`)."""

    epochs: int
    lr: float
    batch_size: int
    seed: int = 0
    memory_format: str = "auto"
    distill: float = 0.0
    temperature: float = 4.0

    @classmethod
    def of(cls, config, num_train: int, *, epochs: int | None = None):
        """The fine-tuning ``config`` (a :class:`~bayesprune.pipeline.config.RunConfig`) asks for on a training
        split of ``num_train`` rows (``epochs`` in place of its ``prune.finetune_epochs`` where given), or
        ``None`` (no epochs)."""
        epochs = config.prune.finetune_epochs if epochs is None else epochs
        if not epochs:
            return None
        batch_size = config.for_data(num_train).data.batch_size
        distill = (config.prune.distill, config.prune.distill_temperature)
        return cls(epochs, config.optim.lr, batch_size, config.seed, config.train.memory_format, *distill)

    def apply(self, net, dataset, masks: dict, *, calibration=None, teacher=None):
        """:func:`finetune` ``net`` on ``dataset``'s training split (moved to ``net``'s device), its batch-norm
        statistics estimated again by ``calibration`` where it has any. With ``distill``, the teacher is
        ``teacher`` (the dense network, where ``net`` is already smaller), else ``net`` as it is given, unmasked."""
        device = next(net.parameters()).device
        objective = None
        if self.distill:
            teacher = copy.deepcopy(net if teacher is None else teacher).to(device)
            options = {"weight": self.distill, "temperature": self.temperature}
            objective = distillation_objective(net, teacher, dataset.task, **options)
        return finetune(
            net,
            dataset.x_train.to(device),
            dataset.y_train.to(device),
            masks,
            epochs=self.epochs,
            lr=self.lr,
            batch_size=self.batch_size,
            seed=self.seed,
            calibration=calibration if has_running_stats(net) else None,
            memory_format=resolve_memory_format(self.memory_format, dataset.input_shape, device),
            objective=objective,
        )

    def test_metric(self, net, dataset, masks: dict, *, calibration=None) -> float:
        """The test metric of ``net`` (a copy is trained) fine-tuned with ``masks`` fixed: what each point of
        the pruning curve reports as ``<metric>_finetuned``."""
        tuned = self.apply(copy.deepcopy(net), dataset, masks, calibration=calibration)
        prediction = predict_network(tuned, dataset.x_test, dataset.task).cpu()
        return metric(dataset.task, prediction, dataset.y_test, target_std=dataset.target_std)
