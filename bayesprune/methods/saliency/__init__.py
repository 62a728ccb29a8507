"""Pruning criteria MP, OBD, LM, QM (and SNIP, random) with multi-stage schedules and the step-size penalty
(paper 001, sections 3-6, Algorithm 1, appendix B).

The dense network is trained first (``train.epochs``, SGD with momentum and weight decay in the
paper). Then, for every criterion × number of stages π × penalty λ, the trained network is pruned in
π stages to ``sparsity`` without any weight update between the stages (Algorithm 1 without its
fine-tuning), the saliencies being re-estimated at every stage on ``examples_per_stage`` training
examples drawn at random (:func:`prune_in_stages`). Each grid point records

* ΔL(θ, Δθ) = |L(θ ⊙ m) − L(θ)| (eq. 1, the quantity the criteria minimise) of the dense trained
  network θ, L the mean loss the loss-model criteria model (cross-entropy on logits; ½‖u − t‖² for
  regression, :func:`bayesprune.methods.saliency.stages.loss_change`) on a fixed random subset of
  ``loss_examples`` training examples, drawn once from the run's seed (all of them if fewer);
* the error of the test split before pruning, right after pruning, and after fine-tuning the sparse
  network for ``finetune_epochs`` with the mask fixed (pruned weights stay exactly zero). With
  ``data.validation = true`` (MNIST) the test split is the last 10,000 training images, the paper's
  validation set (appendix B.1), so these are *validation* errors, as in the paper's tables.

Every grid point starts from the same trained network and draws its stage examples from the same
seed, so points differ only by criterion, π and λ (common random numbers). Fine-tuning every grid
point is expensive: ``finetune = "best"`` fine-tunes only the point of lowest ΔL over λ for each
criterion and π, ``"all"`` every point (needed for Spearman's ρ of section 6.1, Fig. 3). Two grid
points with the same mask (magnitude pruning is invariant to λ and π) share one fine-tuning: it
starts from the same weights and sees the same minibatches, so it would give the same network.

The run's network is the fine-tuned network of the first criterion's best point (lowest ΔL at the
largest π, the paper's Tables 1-3 report the best λ at π = 140); its scores rank the weights by the
stage at which they were pruned and, within a stage, by their saliency at that stage, so a budget
at ``sparsity`` keeps exactly its mask.
"""

from bayesprune.methods.saliency.fitted import SaliencyFitted
from bayesprune.methods.saliency.grid import GridPoint, prune_in_stages, spearman_or_none
from bayesprune.methods.saliency.method import SaliencyMethod
from bayesprune.methods.saliency.options import SaliencyOptions

__all__ = ["GridPoint", "SaliencyFitted", "SaliencyMethod", "SaliencyOptions", "prune_in_stages", "spearman_or_none"]
