"""``[hard-concrete]``: the options of hard-concrete unit gates under a MAC budget."""

from dataclasses import dataclass

from bayesprune.core.validation import MAX_SCALE, is_number, is_scale, require


@dataclass(frozen=True)
class HardConcreteOptions:
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

    macs: float = 0.5
    init_open: float = 0.95
    beta: float = 2 / 3
    gate_lr: float = 0.1
    multiplier_lr: float = 0.05
    warmup: float = 0.5
    min_keep_fraction: float = 0.05
    recalibrate: bool = True

    def __post_init__(self):
        key = "hard-concrete."
        for name in ("macs", "init_open"):
            value = getattr(self, name)
            require(is_number(value) and 0 < value < 1, key + name, "lie in (0, 1)", value)
        for name in ("beta", "gate_lr", "multiplier_lr"):
            value = getattr(self, name)
            require(is_scale(value), key + name, f"be a positive number up to {MAX_SCALE:g}", value)
        for name in ("warmup", "min_keep_fraction"):
            value = getattr(self, name)
            require(is_number(value) and 0 <= value < 1, key + name, "lie in [0, 1)", value)
        require(isinstance(self.recalibrate, bool), key + "recalibrate", "be true or false", self.recalibrate)
