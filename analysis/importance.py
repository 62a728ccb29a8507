"""Feature and node importance from weight inclusion probabilities (paper 003, section 3.5).

The inclusion probabilities p of a fitted sBNN are combined along paths, following the
"connection weights" method of Olden et al. (2004): the importance of a node is the mean, over
every path from that node to the output, of the product of the inclusion probabilities of the
weights on the path. For input features this is ψ (eq. 3.18); φ is its min-max scaling (eq. 3.19).

Layer l has n_l nodes; P^(l) ∈ R^{n_l × n_{l-1}} holds the inclusion probability of the weight from
node j of layer l-1 to node i of layer l, for l = 1, ..., L+1 (layer 0 holds the inputs, layer
L+1 the outputs). Biases do not start paths from an input and are ignored, as in the paper.

Beyond the paper, which defines ψ for MLPs with one output only:

* **Several outputs** (K-class classification): the mean is also taken over the K output units,
  i.e. the paper's division by ∏_{i=1}^{L} n_i becomes a division by ∏_{i=1}^{L+1} n_i after
  summing the rows of P^(L+1). With K = 1 this is exactly eq. 3.18.
* **Convolutions**: the nodes of a convolution are its channels. A ``Conv2d`` weight
  (out, in, kh, kw) is reduced to the (out, in) matrix of its mean inclusion probability over the
  kernel positions, so a path between two channels has the average probability of the weights
  that connect them. For a first convolution the input "features" are the input channels.
* **Convolution → Flatten → Linear**: the linear layer sees channels × H × W inputs, laid out
  channel-major by ``nn.Flatten``; its (out, C·H·W) matrix is folded to (out, C) by averaging over
  the H·W spatial positions of each channel, so the chain of matrices stays (out × in) consistent.

Only plain chains are supported (:func:`bayesprune.core.chain.layer_chain`: ``Linear``/``Conv2d``
layers in module order with pooling, activations and ``Flatten`` between them, no branches, skip
connections or batch norm); anything else raises ``ValueError``.
"""

import numpy as np
import torch

from bayesprune.analysis.selection import (
    DEFAULT_FDR,
    STABILITY_THRESHOLD,
    select_by_bayesian_fdr,
    select_by_empirical_null,
    select_by_stability,
)
from bayesprune.core.chain import layer_chain


def weight_inclusion_matrices(inclusion: dict, model_or_net) -> list:
    """The node influence matrices P^(1), ..., P^(L+1) of section 3.5, in network order.

    Args:
        inclusion: site name → inclusion probabilities with the parameter's shape, as returned by
            ``SpikeSlabGuide.inclusion_probabilities()``.
        model_or_net: a ``BayesianNetwork`` (its ``net`` is used) or the plain ``nn.Module``.

    Returns:
        One (n_l, n_{l-1}) tensor per ``Linear``/``Conv2d`` layer: Linear weights as they are,
        Conv2d weights averaged over the kernel, and a Linear after a flattened convolution folded
        to the convolution's channels (see the module docstring).

    Raises:
        KeyError: a weight site is missing from ``inclusion``.
        ValueError: a value outside [0, 1] (logits passed for probabilities), or layers that do not
            form a chain of matching widths.
    """
    net = getattr(model_or_net, "net", model_or_net)
    matrices, inputs_per_node = [], 1
    for layer in layer_chain(net):
        if layer.weight_site not in inclusion:
            raise KeyError(f"no inclusion probabilities for weight site {layer.weight_site!r}")
        probs = inclusion[layer.weight_site].detach()
        if probs.numel() and not bool(((probs >= 0) & (probs <= 1)).all()):
            raise ValueError(
                f"{layer.weight_site}: inclusion probabilities must lie in [0, 1], got values from "
                f"{probs.min().item():.4g} to {probs.max().item():.4g} (scores such as inclusion logits are "
                "no probabilities: pass fitted.inclusion_probabilities())"
            )
        if probs.dim() == 4:  # Conv2d (out, in, kh, kw): mean over the kernel positions
            probs = probs.mean(dim=(2, 3))
        if inputs_per_node > 1:  # Linear after Flatten of a (C, H, W) map: fold the channel-major inputs to C
            probs = probs.reshape(probs.shape[0], -1, inputs_per_node).mean(dim=2)
        matrices.append(probs)
        inputs_per_node = layer.inputs_per_unit or 1
    return matrices


def node_importance(matrices) -> list:
    r"""Mean path probability from every node of every layer to the output.

    With ψ^(L+1) = 1 for the output nodes, ψ^(l-1) = ψ^(l) P^(l) / n_l: every node of layer l has
    the same number of downstream paths, so the mean over paths from a node of layer l-1 is the
    mean over its successors i of p_i times the mean over paths from i. Unrolled for l = 0 this is
    eq. 3.18, ψ = (1 / ∏_{i=1}^{L+1} n_i) 1ᵀ P^(L+1) ⋯ P^(1), with n_{L+1} = 1 in the paper.

    Args:
        matrices: P^(1), ..., P^(L+1) from :func:`weight_inclusion_matrices`.

    Returns:
        ``[ψ^(0), ψ^(1), ..., ψ^(L+1)]``: entry l holds the n_l node importances of layer l, so
        entry 0 is the feature importance ψ and the last entry (outputs) is all ones.
    """
    importance = [torch.ones(matrices[-1].shape[0], dtype=matrices[-1].dtype, device=matrices[-1].device)]
    for matrix in reversed(matrices):
        importance.append(importance[-1] @ matrix / matrix.shape[0])
    return importance[::-1]


def feature_importance(matrices) -> torch.Tensor:
    """Feature importance ψ_j of eq. 3.18: the mean path inclusion probability from input j to the output.

    Args:
        matrices: P^(1), ..., P^(L+1) from :func:`weight_inclusion_matrices`.

    Returns:
        ψ, one value per input node (per input channel for a convolution-first network).
    """
    return node_importance(matrices)[0]


def path_scores(logits: dict, model_or_net) -> dict:
    """Every weight's (and bias's) inclusion logit, capped by the logit of the importance of the node i it
    feeds (:func:`node_importance`, ψ^(l)_i, the mean path probability to the output of section 3.5):
    min(logit p_w, logit ψ^(l)_i). A weight counts for no more than the node it feeds.

    Ranked by p_w alone, a weight into a hidden unit whose output weights sit in the spike counts as much
    as one the network uses; here it goes with the spike (``sbnn.score = "path"``). The cap, not the
    product p_w ψ^(l)_i (the mean path probability through the weight, exact under q's independence):
    where both round near 1 the product sorts nearly every weight by its node's importance in place of
    its own, which removes weights the network uses (UCI Boston, docs/reproductions.md).

    Args:
        logits: site name → inclusion logits B − A (eq. 3.8) of every weight and bias of a chain of
            layers (:func:`~bayesprune.core.chain.layer_chain`).
        model_or_net: the ``BayesianNetwork`` or its plain network.

    Returns:
        Site name → float64 scores of the same shapes (the weights into the outputs keep their logits).
    """
    net = getattr(model_or_net, "net", model_or_net)
    logits = {site: value.double() for site, value in logits.items()}
    reached = node_importance(weight_inclusion_matrices({k: torch.sigmoid(v) for k, v in logits.items()}, net))[1:]
    scores = {}
    for layer, importance in zip(layer_chain(net), reached):
        cap = torch.logit(importance)  # +inf for a node of importance 1 (the outputs)
        for site in filter(None, (layer.weight_site, layer.bias_site)):
            scores[site] = torch.minimum(logits[site], cap.reshape(-1, *[1] * (logits[site].dim() - 1)))
    return scores


def scaled_importance(psi: torch.Tensor) -> torch.Tensor:
    """Min-max scaled importance φ_j = (ψ_j − min ψ) / (max ψ − min ψ) of eq. 3.19, in [0, 1].

    When all ψ_j are equal (e.g. a single feature) eq. 3.19 is 0/0; every feature then attains the
    maximum and φ is all ones, so no threshold on φ drops a feature for lack of evidence.
    """
    low, span = psi.min(), psi.max() - psi.min()
    if span == 0:
        return torch.ones_like(psi)
    return (psi - low) / span


def importance_table(net, inclusion: dict, feature_names=None) -> list:
    """ψ (eq. 3.18) and φ (eq. 3.19) of every input of a fitted network.

    Args:
        net: the network (or a ``BayesianNetwork`` around it).
        inclusion: site name → inclusion probability of every weight (a fitted sBNN's scores).
        feature_names: one name per input node; defaults to ``x0, x1, ...``.

    Returns:
        One dict ``{"feature", "psi", "phi"}`` per input, in input order.
    """
    psi = feature_importance(weight_inclusion_matrices(inclusion, net)).cpu()
    phi = scaled_importance(psi)
    names = feature_names if feature_names is not None else [f"x{j}" for j in range(len(psi))]
    if len(names) != len(psi):
        raise ValueError(f"got {len(names)} feature names for {len(psi)} inputs")
    return [{"feature": name, "psi": float(s), "phi": float(f)} for name, s, f in zip(names, psi, phi)]


def keep_matrices(fitted) -> tuple:
    """What a fit of any method says about keeping each weight: ``(soft, hard, name)``.

    ``soft`` maps each site to the probability that the weight is kept where the method learns one
    (sBNN inclusion probabilities, PFT's λ and ProbMask's keep-probabilities, PBP's keep logits read as
    probabilities), else ``None``; ``hard`` maps each site to the weights the fitted network keeps
    (Sparse VD: log α at most its threshold; an already sparse network, such as PFT, ProbMask,
    saliency or unit gates, its non-zero weights; otherwise probability at least 1/2); ``name`` says
    what ``soft`` (or ``hard``) holds.
    """
    soft, name = fitted.inclusion_probabilities(), "inclusion probability"
    if soft is None and getattr(fitted, "keep", None) is not None:
        soft, name = fitted.keep, "keep probability"
    if soft is None and fitted.score_name == "keep logit":
        soft, name = (
            {site: torch.sigmoid(value.double()) for site, value in fitted.scores().items()},
            "keep probability",
        )
    if hasattr(fitted, "log_alpha"):
        hard = {site: (value <= fitted.threshold).double() for site, value in fitted.log_alpha().items()}
        return soft, hard, "kept by Sparse VD (log α at most its threshold)"
    if soft is not None and hasattr(fitted, "guide"):  # a posterior over a dense network (sBNN, PBP)
        return soft, {site: (value >= 0.5).double() for site, value in soft.items()}, name
    params = dict(fitted.net.named_parameters())
    hard = {site: (params[site].detach() != 0).double() for site in fitted.sites}
    return soft, hard, name if soft is not None else "kept by the fitted network (non-zero weight)"


def input_importance(fitted, feature_names=None) -> list:
    """Input importance of a fit of any method, in input order (``bayesprune importance`` of a run
    without pooled restarts).

    Returns:
        One dict per input: ``feature``; ``psi``, eq. 3.18 read with the method's keep-probabilities
        of :func:`keep_matrices` (its kept weights, 0 or 1, where it has none), and ``phi``;
        ``weights_kept`` (first-layer weights from the input that the network keeps);
        ``first_layer_score`` (the method's scores of those weights summed: for saliency the
        pruning-order ranks, for Sparse VD −log α; NaN for a method that scores units, not weights); ``selected`` (a path of kept weights joins
        the input to the output: the network uses it); ``rank`` (1 = highest ψ).
    """
    soft, hard, _ = keep_matrices(fitted)
    net = fitted.net
    psi = feature_importance(weight_inclusion_matrices(hard if soft is None else soft, net)).cpu()
    connected = feature_importance(weight_inclusion_matrices(hard, net)).cpu() > 0
    first = layer_chain(net)[0].weight_site
    kept = _sum_per_input(hard[first].cpu())
    scores = fitted.scores()
    scores = _sum_per_input(scores[first].double().cpu()) if first in scores else torch.full((len(psi),), float("nan"))
    names = feature_names if feature_names is not None else [f"x{j}" for j in range(len(psi))]
    if len(names) != len(psi):
        raise ValueError(f"got {len(names)} feature names for {len(psi)} inputs")
    order = torch.argsort(-psi.double(), stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(1, len(psi) + 1)
    phi = scaled_importance(psi)
    return [
        {
            "feature": names[j],
            "psi": float(psi[j]),
            "phi": float(phi[j]),
            "weights_kept": int(kept[j]),
            "first_layer_score": float(scores[j]),
            "selected": bool(connected[j]),
            "rank": int(rank[j]),
        }
        for j in range(len(psi))
    ]


def _sum_per_input(weight: torch.Tensor) -> torch.Tensor:
    """The sum of a first layer's (out, in[, kh, kw]) values over everything but the input."""
    return weight.reshape(weight.shape[0], weight.shape[1], -1).sum(dim=(0, 2))


def node_layer_names(model_or_net) -> list:
    """Names of the node layers :func:`node_importance` returns: ``"input"``, then each weighted
    layer's module name (its output nodes), the last being the network outputs."""
    net = getattr(model_or_net, "net", model_or_net)
    return ["input"] + [layer.name or "weight" for layer in layer_chain(net)]


def node_importance_table(net, inclusion: dict) -> list:
    """Node importance at every layer of a fitted network (:func:`node_importance`), one row per node.

    Returns:
        Dicts ``{"layer", "node", "importance"}``: layer ``"input"`` holds ψ of eq. 3.18, then each
        weighted layer's output nodes (channels for a convolution) under its module name, the last
        being the network outputs (importance 1).
    """
    layers = node_layer_names(net)
    importance = node_importance(weight_inclusion_matrices(inclusion, net))
    return [
        {"layer": layer, "node": node, "importance": float(value)}
        for layer, values in zip(layers, importance)
        for node, value in enumerate(values.cpu())
    ]


#: Probability mass of the interval :func:`pooled_importance` gives, as ArviZ's default HDI (3% to 97%).
INTERVAL = 0.94
#: The file of a run's selection list (``bayesprune importance``).
SELECTION = "selection.json"
#: R-hat above which the report names a feature whose restarts disagree.
RHAT_WARNING = 1.05
#: Spearman correlation between the pooled ψ of the two halves of the restarts below which a ranking is
#: called unstable (:func:`half_spearman`): another run's ranking would differ.
STABLE_SPEARMAN = 0.9


def half_spearman(psi_at_p) -> float:
    """How well a pooled ranking reproduces: the Spearman rank correlation between the mean ψ(p_c) of the
    first half of the restarts and that of the second (the first ⌊C/2⌋ against the next ⌊C/2⌋). Each half
    pools half the run's restarts, so the whole run's pooled ranking reproduces at least about as well.
    NaN with fewer than two restarts or two inputs, or where a half ranks every input alike."""
    from scipy.stats import spearmanr

    at_p = np.asarray(psi_at_p, dtype=float)
    half = len(at_p) // 2
    if half == 0 or at_p.shape[1] < 2:
        return float("nan")
    first, second = at_p[:half].mean(axis=0), at_p[half : 2 * half].mean(axis=0)
    if np.ptp(first) == 0 or np.ptp(second) == 0:
        return float("nan")
    return float(spearmanr(first, second)[0])


def pooled_importance(psi_draws, psi_at_p, feature_names=None, *, fdr: float = DEFAULT_FDR) -> list:
    """Feature importance of several restarts pooled: the mixture (1/C) Σ_c q_c of the C fitted posteriors.

    ψ(Z) at a draw Z of every inclusion indicator is an unbiased draw of ψ(p) (eq. 3.18 is a mean of
    products of independent indicators), so the draws of all restarts together are draws of ψ under
    the mixture, whose mean is the mean of the restarts' ψ(p_c).

    Args:
        psi_draws: ``(C, S, D)`` ψ(Z) at S draws of each restart (``posterior.psi`` of ``posterior.nc``).
        psi_at_p: ``(C, D)`` ψ(p_c) of each restart (``variational.psi``).
        feature_names: one per input; ``x0, x1, ...`` by default.
        fdr: the bound on the posterior expected false-discovery rate of the selection.

    Returns:
        One dict per input, in input order: ``feature``; ``psi`` (the mixture's mean); ``phi``
        (eq. 3.19 of ``psi``); ``psi_sd``, ``psi_low``, ``psi_high`` (sd and central
        :data:`INTERVAL` interval of the pooled draws); ``restart_low``, ``restart_high`` (the
        lowest and highest ψ(p_c)); ``restart_rank_best``, ``restart_rank_worst`` (the best and worst rank a
        single restart's ψ(p_c) gives the input); ``r_hat`` and ``ess`` across restarts (ArviZ's rank-normalised
        split R-hat and bulk ESS; NaN with one restart); ``inclusion_probability`` (the pooled
        posterior probability that ψ_j(Z) > 0, i.e. that a path of included weights joins input j
        to the output); ``selected`` (:func:`~bayesprune.analysis.selection.select_by_bayesian_fdr`);
        ``rank`` (1 = highest ψ).
    """
    draws = np.asarray(psi_draws, dtype=float)
    at_p = np.asarray(psi_at_p, dtype=float)
    chains, _, features = draws.shape
    if at_p.shape != (chains, features):
        raise ValueError(f"psi_at_p has shape {at_p.shape}, expected {(chains, features)}")
    names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(features)]
    if len(names) != features:
        raise ValueError(f"got {len(names)} feature names for {features} inputs")
    psi = torch.as_tensor(at_p.mean(axis=0))
    pooled = draws.reshape(-1, features)
    tail = (1 - INTERVAL) / 2
    low, high = np.quantile(pooled, [tail, 1 - tail], axis=0)
    low, high = np.minimum(low, at_p.min(axis=0)), np.maximum(high, at_p.max(axis=0))
    r_hat, ess = restart_diagnostics(draws)
    inclusion = torch.as_tensor((pooled > 0).mean(axis=0))
    selected = select_by_bayesian_fdr(inclusion, fdr)
    rank = _ranks(psi.numpy()[None])[0]
    restart_ranks = _ranks(at_p)
    phi = scaled_importance(psi)
    return [
        {
            "feature": names[j],
            "psi": float(psi[j]),
            "phi": float(phi[j]),
            "psi_sd": float(pooled[:, j].std()),
            "psi_low": float(low[j]),
            "psi_high": float(high[j]),
            "restart_low": float(at_p[:, j].min()),
            "restart_high": float(at_p[:, j].max()),
            "restart_rank_best": int(restart_ranks[:, j].min()),
            "restart_rank_worst": int(restart_ranks[:, j].max()),
            "r_hat": float(r_hat[j]),
            "ess": float(ess[j]),
            "inclusion_probability": float(inclusion[j]),
            "selected": bool(selected[j]),
            "rank": int(rank[j]),
        }
        for j in range(features)
    ]


def _ranks(values: np.ndarray) -> np.ndarray:
    """The rank of every column within each row of ``values`` (1 = highest; ties in column order)."""
    ranks = np.empty(values.shape, dtype=int)
    for row, order in zip(ranks, np.argsort(-values, axis=1, kind="stable")):
        row[order] = np.arange(1, values.shape[1] + 1)
    return ranks


def agreed_tiers(rows: list) -> list:
    """The tiers every restart agrees on: the features in the pooled order (:func:`pooled_importance`'s
    rows), cut after position k wherever every restart's ψ(p_c) puts the same k features first; within a
    tier the restarts order the features each their own way. All tiers of one feature: every restart
    gives the same order; one tier: they agree on no head of it."""
    ordered = sorted(rows, key=lambda row: row["rank"])
    tiers, tier, worst = [], [], 0
    for position, row in enumerate(ordered, start=1):
        tier.append(row["feature"])
        worst = max(worst, row["restart_rank_worst"])
        if worst == position:  # no restart ranks any of the first `position` features lower than that
            tiers.append(tier)
            tier = []
    return tiers


def tiers_text(tiers: list, name=str) -> str:
    """Tiers of :func:`agreed_tiers` as one line, ``[s5, bmi] > [bp] > ...``, each feature written by ``name``."""
    return " > ".join("[" + ", ".join(name(feature) for feature in tier) + "]" for tier in tiers)


def restart_diagnostics(draws) -> tuple:
    """R-hat and bulk ESS of every column of ``(C, S, D)`` draws across the C restarts (ArviZ's
    rank-normalised split R-hat, Vehtari et al. 2021). Both are NaN with one restart: one fit says
    nothing about whether another would agree."""
    import arviz as az

    draws = np.asarray(draws, dtype=float)
    if draws.shape[0] < 2:
        nan = np.full(draws.shape[2], np.nan)
        return nan, nan.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        r_hat = np.array([az.rhat(draws[:, :, j]) for j in range(draws.shape[2])], dtype=float)
        ess = np.array([az.ess(draws[:, :, j], method="bulk") for j in range(draws.shape[2])], dtype=float)
    return r_hat, ess


def pooled_importance_of(idata, *, fdr: float = DEFAULT_FDR) -> list:
    """:func:`pooled_importance` of a run's ``posterior.nc`` (``posterior.psi`` and ``variational.psi``)."""
    draws = idata.posterior["psi"].transpose("chain", "draw", "feature")
    at_p = idata["variational"]["psi"].transpose("chain", "feature")
    return pooled_importance(draws.values, at_p.values, [str(name) for name in draws["feature"].values], fdr=fdr)


def pooled_node_importance_of(idata, layers: list, num_outputs: int) -> list:
    """Node importance of every layer (:func:`node_importance_table`'s rows) as the mean over the restarts
    of each restart's value at p (the mixture's mean), from ``posterior.nc``'s ``variational`` group.

    Args:
        layers: :func:`node_layer_names` of the network: ``"input"``, the hidden layers, the outputs.
        num_outputs: the network's outputs, whose importance is 1.
    """
    variational = idata["variational"]
    values = [variational["psi"].mean("chain").values]
    values += [variational[f"node_importance.{layer}"].mean("chain").values for layer in layers[1:-1]]
    values.append(np.ones(num_outputs))
    return [
        {"layer": layer, "node": node, "importance": float(value)}
        for layer, row in zip(layers, values)
        for node, value in enumerate(row)
    ]


#: What :func:`empirical_null_selection` does, in words (``selection.json`` and the report).
EMPIRICAL_NULL_RULE = (
    "Benjamini-Hochberg at fdr on one-sided p-values of every group's log psi (psi: the pooled mean probability "
    "that a path of included weights joins its inputs to the output) against a normal null centred at the "
    "groups' median, scaled by their median absolute deviation (Efron's empirical null); the false-discovery "
    "rate is about fdr or less when most groups are irrelevant"
)


def empirical_null_selection(rows: list, fdr: float) -> tuple:
    """``(chosen, description)``: :func:`~bayesprune.analysis.selection.select_by_empirical_null` at level
    ``fdr`` on log ψ (eq. 3.18) of the rows (inputs or groups of pooled restarts).

    An irrelevant input keeps a path of included weights in well over half the draws (its ~100
    first-layer weights each have a small inclusion probability), so ψ and the inclusion probabilities
    overstate relevance when read as calibrated; compared with the other inputs' instead, the irrelevant
    ones form the null. ψ, the mean path inclusion, keeps apart relevant inputs whose inclusion
    probabilities all reach 1; its log, because ψ is a product of probabilities (a scale, not a location).
    Chosen over the inclusion logit on a simulation (docs/reproductions.md, Selection against known truth),
    and as the default over the Bayesian FDR rule, knockoffs and stability across restarts on simulations
    with users' networks (benchmarks/importance_default.py).
    """
    psi = torch.tensor([row["psi"] for row in rows], dtype=torch.float64)
    chosen = select_by_empirical_null(torch.log(psi.clamp(min=torch.finfo(torch.float64).tiny)), fdr)
    return chosen.tolist(), EMPIRICAL_NULL_RULE


#: What :func:`stability_selection` does, in words (``selection.json`` and the report).
STABILITY_RULE = (
    "stability selection over the restarts (Meinshausen and Buehlmann 2010, the restarts in place of subsamples): "
    "each restart selects by the empirical null of its own log psi at fdr (Benjamini-Hochberg against a normal null "
    "centred at the median, scaled by the median absolute deviation; Efron's empirical null), and what at least "
    f"{STABILITY_THRESHOLD:.0%} of the restarts select is selected (selection_frequency); chosen as the default by "
    "measurement (benchmarks/importance_default.py, docs/reproductions.md)"
)


def stability_selection(restart_psi, fdr: float = DEFAULT_FDR) -> tuple:
    """``(chosen, frequency)``: :func:`~bayesprune.analysis.selection.select_by_stability` of every restart's
    :func:`empirical_null_selection` on its own ψ(p_c) (rows of ``restart_psi``, ``(C, p)``), and the share of
    the restarts selecting each column. Pooled ψ averages the restarts, which narrows the null inputs' spread
    until a few null inputs' small shared lead stands out (a user's two-layer MLP on Friedman-1: 2 false of 7);
    each restart alone keeps the spread the null is learnt from."""
    own = np.array([empirical_null_selection([{"psi": value} for value in psi], fdr)[0] for psi in restart_psi])
    return select_by_stability(own).tolist(), own.mean(axis=0)


def disagreeing_features(rows, threshold: float = RHAT_WARNING) -> list:
    """Names of the features whose R-hat across restarts exceeds ``threshold``, highest R-hat first."""
    flagged = [row for row in rows if row["r_hat"] > threshold]
    return [row["feature"] for row in sorted(flagged, key=lambda row: -row["r_hat"])]


def plot_importance(rows, path, *, title="Feature importance"):
    """ψ (eq. 3.18) of every feature with its interval, most important on top, selected inputs filled.

    ψ is drawn on its own scale, not min-max scaled (φ of eq. 3.19 sets the least important
    feature to exactly 0, however large its ψ).

    Args:
        rows: rows of :func:`importance_table` or :func:`pooled_importance` (with ``psi_low``,
            ``psi_high`` and ``selected``, the interval and the selection are drawn).
        path: the PNG file to write.
    """
    from bayesprune.analysis.plots import plt, save_figure  # matplotlib, imported where a plot is drawn

    rows = sorted(rows, key=lambda row: row["psi"])
    positions = np.arange(len(rows))
    psi = np.array([row["psi"] for row in rows])
    figure, axis = plt.subplots(figsize=(5.5, 1.2 + 0.24 * len(rows)))
    if all("psi_low" in row for row in rows):
        errors = [psi - np.array([row["psi_low"] for row in rows]), np.array([row["psi_high"] for row in rows]) - psi]
        axis.errorbar(psi, positions, xerr=np.clip(errors, 0, None), fmt="none", ecolor="0.3", capsize=2)
    selected = np.array([row.get("selected", True) for row in rows], dtype=bool)
    axis.scatter(psi[selected], positions[selected], color="C0", zorder=3, label="selected")
    axis.scatter(
        psi[~selected], positions[~selected], facecolors="white", edgecolors="C0", zorder=3, label="not selected"
    )
    axis.set_yticks(positions, [row["feature"] for row in rows])
    axis.set(
        xlabel="importance ψ (eq. 3.18); bar: 94% interval, restarts pooled",
        ylabel="input feature",
        xlim=(0, None),
        title=title,
    )
    if any("selected" in row for row in rows):
        axis.legend(loc="lower right", fontsize="small")
    save_figure(figure, path)


def plot_importance_image(rows, input_shape, path, *, title="Feature importance"):
    """The importance ψ (eq. 3.18) of image inputs as a heat map of the image, one panel per channel.

    ψ is drawn on its own scale from 0 to its largest value, not min-max scaled: φ of eq. 3.19 would
    draw the least important pixel as exactly 0, however large its ψ.

    Args:
        rows: rows of :func:`importance_table` or :func:`pooled_importance`, one per pixel, in input
            (C, H, W) order.
        input_shape: ``(C, H, W)``.
        path: the PNG file to write.

    Returns:
        The ψ image drawn, shape ``(C, H, W)``.
    """
    from bayesprune.analysis.plots import plt, save_figure  # matplotlib, imported where a plot is drawn

    channels, height, width = input_shape
    psi = np.asarray([row["psi"] for row in rows], dtype=float).reshape(channels, height, width)
    top = float(psi.max()) if psi.size and psi.max() > 0 else 1.0
    figure, axes = plt.subplots(1, channels, figsize=(3.2 * channels + 0.8, 3.2), squeeze=False)
    for channel, axis in enumerate(axes[0]):
        image = axis.imshow(psi[channel], cmap="viridis", vmin=0, vmax=top)
        axis.set(xticks=[], yticks=[], title=title if channels == 1 else f"{title}, channel {channel}")
    figure.colorbar(image, ax=axes[0, -1], label="importance ψ (eq. 3.18)")
    save_figure(figure, path)
    return psi
