"""Bernoulli unit/filter gates with Beta or Flattening hyper-priors, pruning while training (paper 004).

Every hidden unit of fully connected layers and every filter of convolutions carries a gate
ξ ~ Bernoulli(θ) (eq. 1); the weights are MAP estimates under N(0, λ⁻¹) (eqs. 4, 12), the data
term the dataset-scaled sum (N/B)·Σ −log p of one minibatch with one gate sample (eq. 16).
Algorithm 1 runs step by step: the weight gradient of eq. 17, θ's gradient of eq. 19 from an
estimator of C1 − C0 (:mod:`bayesprune.core.gates`) and the hyper-prior's closed form
(:mod:`bayesprune.methods.unit_gates.hyperpriors`), Adam on both, θ clipped to [θ_l, θ_h], each unit's weights
projected to ‖w_b‖² + ‖w_f‖² ≤ 2 φ_max, and a unit switched off for good when (i) θ < θ_tol or
(ii) θ fell by θ_per below its running maximum after n0 steps. A unit meeting the condition leaves
the network, its gates and the optimiser state at the step it does (step 4: "remove them from the
network to reduce the computational cost in further training iterations"), so every later step
costs less. After training, units with θ < ``final_threshold`` go, the rest are kept
deterministically (ξ = 1) and the smaller network is fine-tuned (section 7.1).
"""

from bayesprune.methods.unit_gates.fitted import UnitGatesFitted
from bayesprune.methods.unit_gates.method import UnitGatesMethod, split_groups
from bayesprune.methods.unit_gates.options import UnitGatesOptions
from bayesprune.methods.unit_gates.training import GateTraining, adam, data_cost

__all__ = [
    "GateTraining",
    "UnitGatesFitted",
    "UnitGatesMethod",
    "UnitGatesOptions",
    "split_groups",
    "adam",
    "data_cost",
]
