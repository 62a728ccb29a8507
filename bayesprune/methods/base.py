"""The two types every method shares: :class:`Method` (options, fit, restore) and :class:`Fitted`.

Downstream code (the runner, evaluation, pruning, export, reports, the command line) reads a
:class:`Fitted` and nothing else, so it never depends on one method's internals.
"""
import copy
from typing import ClassVar

import torch
from torch import nn


class Fitted:
    """What a method hands over after fitting (or restoring from a checkpoint).

    Attributes:
        method: the registered name of the method that produced it.
        net: the architecture in its current structure (smaller than built if the method removed
            units while training); its parameter names are the site names.
        history: the training :class:`~bayesprune.fit.History` (``None`` when restored).
        seconds: training time.
        predictive_samples: Monte-Carlo draws of the predictive; 0 for a method without a posterior.
        score_name: what :meth:`scores` are, for tables and plots (``"inclusion logit"``).
    """

    method: str = ""
    score_name: str = "score"

    def __init__(self, net: nn.Module, *, history=None, seconds: float = 0.0, predictive_samples: int = 0):
        self.net = net
        self.history = history
        self.seconds = seconds
        self.predictive_samples = predictive_samples

    @property
    def sites(self) -> dict:
        """Site name → shape of every prunable tensor, in network order."""
        return {name: param.shape for name, param in self.net.named_parameters()}

    def scores(self) -> dict:
        """Site name → importance score tensor (higher = keep), as :func:`bayesprune.pruning.prune` reads.

        Scores must not saturate: a probability that rounds to 1.0 ties with its neighbours, and a
        tied budget removes the earlier entries in network order. Return logits or float64 values.
        """
        raise NotImplementedError

    def inclusion_probabilities(self):
        """Site name → inclusion probability of every weight, for importance paths (paper 003, eqs.
        3.18-3.19); ``None`` for a method without them."""
        return None

    def predict(self, x: torch.Tensor, *, masks=None, num_samples: int = 0) -> torch.Tensor:
        """Predictive mean (class probabilities, or regression means in training units) at inputs ``x``.

        ``num_samples = 0`` evaluates the point estimate; ``S > 0`` averages over S posterior draws.
        ``masks`` (site name → bool tensor) zero the pruned entries in every evaluation.
        """
        raise NotImplementedError

    def network(self) -> nn.Module:
        """A plain ``nn.Module`` (a copy) holding the point estimate the method predicts with."""
        raise NotImplementedError

    def metrics(self) -> dict:
        """The method's own numbers for ``metrics.json`` (beside the shared test metrics)."""
        return {}

    def state_dict(self) -> dict:
        """Tensors and plain data that :meth:`Method.restore` rebuilds this from (``weights_only`` loadable)."""
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        """Put a :meth:`state_dict` of this same fit back in place (early stopping's best epoch)."""
        raise NotImplementedError


class NetworkFitted(Fitted):
    """A :class:`Fitted` whose result is one deterministic network (no posterior): it predicts with the
    network, masked entries zeroed, and reports the method's numbers in ``report``."""

    def __init__(self, net: nn.Module, *, history=None, seconds: float = 0.0, report=None, task: str = "classification"):
        super().__init__(net, history=history, seconds=seconds)
        self.report, self.task = report or {}, task

    def predict(self, x, *, masks=None, num_samples=0):
        net = self.network()
        if masks:
            with torch.no_grad():
                for name, param in net.named_parameters():
                    if name in masks:
                        param.mul_(masks[name].to(param.device, param.dtype))
        net.eval()
        with torch.no_grad():
            output = net(x)
        return torch.softmax(output, dim=-1) if self.task == "classification" else output.squeeze(-1)

    def network(self):
        return copy.deepcopy(self.net)

    def metrics(self) -> dict:
        return dict(self.report)


class SparseNetworkFitted(NetworkFitted):
    """A :class:`NetworkFitted` whose network is already sparse, with scores that are ranks without ties
    (float64, 0 … D − 1), so that a budget at the network's sparsity keeps exactly its mask."""

    def __init__(self, net: nn.Module, ranks: dict, **kwargs):
        super().__init__(net, **kwargs)
        self.ranks = ranks

    def scores(self) -> dict:
        return dict(self.ranks)

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "ranks": {site: r.clone() for site, r in self.ranks.items()}}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.ranks = {site: r.clone() for site, r in state["ranks"].items()}

    @classmethod
    def restore(cls, net: nn.Module, state: dict, *, task: str):
        """The fit whose :meth:`state_dict` is ``state``, around ``net``."""
        net.load_state_dict(state["net"])
        return cls(net, dict(state["ranks"]), task=task)


class GuideFitted(Fitted):
    """A :class:`Fitted` Pyro model and guide: the point estimate is the guide's ``mean_params()``, the
    Monte-Carlo predictive averages ``sample_params()`` draws (:func:`bayesprune.predict.predict`)."""

    def __init__(self, model, guide, *, history=None, seconds: float = 0.0, predictive_samples: int = 0):
        super().__init__(model.net, history=history, seconds=seconds, predictive_samples=predictive_samples)
        self.model, self.guide = model, guide

    def predict(self, x, *, masks=None, num_samples=0):
        from bayesprune.predict import predict

        return predict(self.model, self.guide, x, num_samples=num_samples, masks=masks)

    def network(self):
        net = copy.deepcopy(self.net)
        net.load_state_dict(self.guide.mean_params())
        return net


class Method:
    """A registered pruning method (:func:`bayesprune.methods.register_method`).

    Class attributes:
        name: the value of ``method`` in a config, and the name of the method's own TOML table.
        Options: a frozen dataclass for that table, validated in ``__post_init__`` with
            :class:`~bayesprune.errors.ConfigError` messages naming the field (``sbnn.pi``).
        legacy_keys: ``"section.key"`` of older config layouts → option name (``None``: dropped),
            folded into the method's table when such a config is loaded.
        resumable: the method's checkpoints hold its loop's state and :meth:`fit` continues from one
            (``bayesprune run --resume``).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type]
    legacy_keys: ClassVar[dict] = {}
    resumable: ClassVar[bool] = False

    def fit(self, net: nn.Module, dataset, config, *, device, seed: int, checkpoint=None, progress: bool = False,
            callbacks=(), resume=None) -> Fitted:
        """Fit on ``dataset`` starting from ``net``; ``config.method_options`` is an :attr:`Options`.

        ``checkpoint`` is a path to save the state to during training (see
        :class:`bayesprune.checkpoint.Checkpoint`), or ``None``. ``callbacks`` are factories
        ``make(fitted) -> callback`` of training-loop callbacks (:class:`bayesprune.fit.Callback`)
        that watch the fit being made, such as early stopping; the method adds them to its loop.
        ``resume`` is a checkpoint of this fit as read (:func:`bayesprune.checkpoint.read_checkpoint`),
        holding the loop's :class:`~bayesprune.fit.LoopState` under ``"loop"``, to continue from
        exactly; only a method whose :attr:`resumable` is true is given one.
        """
        raise NotImplementedError

    def restore(self, net: nn.Module, dataset, config, state: dict) -> Fitted:
        """Rebuild the :class:`Fitted` whose :meth:`Fitted.state_dict` is ``state`` around ``net``."""
        raise NotImplementedError

    def inference_data(self, fits: list, dataset, *, seed: int):
        """ArviZ data of independent fits (chains) for ``posterior.nc``, or ``None`` without a posterior."""
        return None

    def certificate(self, fitted: Fitted, dataset, config, *, samples: int | None = None) -> dict | None:
        """A generalisation certificate of ``fitted`` computed again from the training data
        (``bayesprune certify``), with ``samples`` Monte-Carlo draws where it needs them; ``None`` for a
        method without one."""
        return None

    def report_sections(self, run_dir, metrics: dict) -> list:
        """Markdown sections of ``report.md`` of the method's own (writing their plots into
        ``run_dir``), from the run's files alone; none by default."""
        return []
