"""``[hard-concrete]``: the options of hard-concrete unit gates under a MAC budget."""

from dataclasses import dataclass

from bayesprune.core.validation import FLAG, option, scale, unit, validate
from bayesprune.methods.stages import Stage, Staged


@dataclass(frozen=True)
class HardConcreteOptions(Staged):
    """``[hard-concrete]``: the gates, their MAC-weighted expected-L0 constraint and the cut.

    Attributes:
        macs: the fraction of the dense network's MACs to keep (:func:`bayesprune.core.export.count_macs`,
            weighted layers): the expected MACs are held to it while training and the learned network is
            cut to at most it.
        init_open: P(z ≠ 0) of every gate at the start (eq. 12).
        beta: the hard-concrete temperature β (2/3 in the paper).
        gate_lr: Adam's rate for log α.
        multiplier_lr: the rate of gradient ascent on the two Lagrange multipliers.
        warmup: the fraction of the steps over which the MAC target falls linearly from the dense
            network's to ``macs`` (then held).
        min_keep_fraction: the share of each group's units (those of largest log α, at least one) the
            cut always keeps.
        recalibrate: estimate the batch norms' running statistics of the cut network again on training
            batches.
    """

    macs: float = option(0.5, unit())
    init_open: float = option(0.95, unit())
    beta: float = option(2 / 3, scale())
    gate_lr: float = option(0.1, scale())
    multiplier_lr: float = option(0.05, scale())
    warmup: float = option(0.5, unit(open_low=False))
    min_keep_fraction: float = option(0.05, unit(open_low=False))
    recalibrate: bool = option(True, FLAG)

    def fit_stages(self, epochs):
        return (Stage("gates", "the weights, the units' hard-concrete gates log α and the MAC multiplier", epochs),)

    def __post_init__(self):
        validate(self, "hard-concrete")
