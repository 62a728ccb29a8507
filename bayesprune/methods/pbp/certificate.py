"""The rows S \\ S_P the certificate is measured on and the Gibbs risk's draws there (paper 000, appendix A.3)."""

import hashlib
import math

import torch
from torch.distributions import kl_divergence

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.loop import check_stop
from bayesprune.core.tasks import chunks, rows_at

#: Rows per forward pass when a sampled network is scored on a data split.
EVALUATION_CHUNK = 10_000


#: Weights drawn at once when every example has a network of its own (about 64 MB of float32).
PER_EXAMPLE_WEIGHTS = 2**24


def split_rows(num_train: int, alpha: float, seed: int) -> tuple:
    """Row indices of S_P (the first ⌊α·N⌋ of a permutation drawn from ``seed``) and of S \\ S_P."""
    order = torch.randperm(num_train, generator=torch.Generator().manual_seed(seed))
    cut = math.floor(alpha * num_train)
    return order[:cut], order[cut:]


def examples_digest(x, y) -> str:
    """SHA-256 of the examples ``(x, y)`` in their order: the fingerprint of S \\ S_P a certificate checks."""
    digest = hashlib.sha256()
    for tensor in (*chunks(x, EVALUATION_CHUNK), y):  # x's rows in order: the bytes of the whole tensor
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def bound_examples(fitted, data) -> tuple:
    """``(x, y)`` of the fit's S \\ S_P, found in ``data`` by the rows the fit recorded: ``data`` is the
    training split as loaded (``bayesprune certify``) or the part of it the fit was given
    (``extras["train_rows"]``, :func:`bayesprune.core.early_stopping.hold_out`).

    Raises:
        BayesPruneError: the fit recorded no rows (a checkpoint before they were), ``data`` lacks one of
            them, or its examples there are not the ones the fit certified on (the data changed).
    """
    if fitted.bound_rows is None:
        raise BayesPruneError(
            "this PBP fit was saved before the rows of S \\ S_P were recorded; fit it again to certify it"
        )
    given = data.extras.get("train_rows", torch.arange(data.num_train))
    position = torch.full((max(int(given.max()), int(fitted.bound_rows.max())) + 1,), -1, dtype=torch.int64)
    position[given] = torch.arange(len(given))
    local = position[fitted.bound_rows]
    if (
        bool((local < 0).any())
        or examples_digest(rows_at(data.x_train, local), data.y_train[local]) != fitted.bound_digest
    ):
        raise BayesPruneError(
            f"the training data does not hold the {len(local)} examples of S \\ S_P this fit certified on, "
            "at the rows it recorded (its data or data options changed)"
        )
    return rows_at(data.x_train, local), data.y_train[local]


@torch.no_grad()
def gibbs_errors(model, guide, x, y, *, samples: int, sampling: str = "networks") -> torch.Tensor:
    """Independent estimates, each in [0, 1], whose mean estimates the 0-1 Gibbs risk of ``guide`` on (x, y).

    ``"networks"`` (appendix A.3, Langford & Caruana's sample convergence): the error of each of
    ``samples`` networks drawn from Q on all of (x, y), one value per network. ``"examples"``: the
    0-1 loss of a network drawn for each example and draw, ``samples`` · len(y) values. Both means have
    the Gibbs risk as their expectation, and both sets are independent variables in [0, 1], so the
    kl form of Hoeffding's inequality (Hoeffding 1963, Thm. 1, which does not need them identically
    distributed) bounds the Gibbs risk by :func:`bayesprune.methods.pbp.bounds.sample_risk_bound` of their mean with
    m = the number of values. The per-example draws give m = n instead of the number of networks, so a
    much smaller slack for the same number of weight draws (a deviation from the paper's procedure,
    not from its theorem).
    """
    if sampling == "examples":
        return _per_example_errors(model, guide, x, y, draws=samples)
    errors = []
    for _ in range(samples):
        check_stop("while drawing networks from the posterior")
        params = guide.sample_params()
        wrong = sum(
            int((model.network(params, xs).argmax(-1) != ys).sum())
            for xs, ys in zip(chunks(x, EVALUATION_CHUNK), torch.split(y, EVALUATION_CHUNK))
        )
        errors.append(wrong / len(y))
    return torch.tensor(errors, dtype=torch.float64)


def _per_example_errors(model, guide, x, y, *, draws: int) -> torch.Tensor:
    """The 0-1 loss of a network drawn from ``guide`` for each example of (x, y), ``draws`` times."""
    posteriors = guide.posteriors()
    weights = sum(q.loc.numel() for q in posteriors.values())
    chunk = max(1, min(EVALUATION_CHUNK, PER_EXAMPLE_WEIGHTS // weights))
    forward = torch.func.vmap(lambda params, example: model.network(params, example[None])[0])
    wrong = []
    for _ in range(draws):
        for xs, ys in zip(chunks(x, chunk), torch.split(y, chunk)):
            check_stop("while drawing networks from the posterior")
            params = {name: q.sample((len(xs),)) for name, q in posteriors.items()}
            wrong.append(forward(params, xs).argmax(-1) != ys)
    return torch.cat(wrong).double().cpu()


def network_kl(guide, priors: dict) -> float:
    """KL(Q ‖ P) summed over every site of the guide, in float64 (the term of eqs. 4 and 7)."""
    with torch.no_grad():
        return float(sum(kl_divergence(q, priors[name]).double().sum() for name, q in guide.posteriors().items()))
