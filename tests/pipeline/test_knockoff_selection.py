"""``bayesprune importance --selection knockoff`` (issue 38, item 2): the method is refit on the inputs
beside their knockoff copies and selects by how far each input's ψ leads its copies'; the fit is
replaced here by a stand-in whose ψ is each column's absolute correlation with the target, so the
wiring is checked without training."""

import numpy as np
import pytest
import torch

import bayesprune.pipeline.importance as importance_module
from bayesprune.core.errors import BayesPruneError
from bayesprune.data import REGRESSION, Dataset
from bayesprune.pipeline.config import RunConfig, apply_overrides


class CorrelationMethod:
    """Records every dataset it is fitted on; its "fit" is the columns' absolute correlation with y."""

    def __init__(self):
        self.fits = []

    def fit(self, net, data, options, ctx):
        self.fits.append((data, ctx.seed))
        x, y = data.x_train.double().numpy(), data.y_train.double().numpy()
        return np.abs([np.corrcoef(column, y)[0, 1] for column in x.T])


@pytest.fixture
def method(monkeypatch):
    stand_in = CorrelationMethod()
    monkeypatch.setattr(importance_module, "get_method", lambda name: stand_in)
    monkeypatch.setattr(importance_module, "input_importance", lambda psi: [{"psi": value} for value in psi])
    return stand_in


def table(rows=4000, features=6, seed=0):
    """x ~ N(0, AR(1) 0.5), y depends on x0 and x3 only."""
    rng = np.random.default_rng(seed)
    sigma = 0.5 ** np.abs(np.subtract.outer(np.arange(features), np.arange(features)))
    x = rng.multivariate_normal(np.zeros(features), sigma, size=rows)
    y = 2 * x[:, 0] + 2 * x[:, 3] + rng.standard_normal(rows)
    as_tensor = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    return (
        Dataset(
            name="knockoff-test",
            task=REGRESSION,
            x_train=as_tensor(x[:3000]),
            y_train=as_tensor(y[:3000]),
            x_test=as_tensor(x[3000:]),
            y_test=as_tensor(y[3000:]),
            input_shape=(features,),
            num_classes=None,
        ),
        sigma,
    )


@pytest.mark.parametrize("copies", [1, 2])
def test_knockoff_importance_is_the_fits_importance_of_each_input_and_its_copies(method, copies):
    pytest.importorskip("knockpy")
    dataset, sigma = table()
    config = RunConfig.from_dict(apply_overrides({}, ["method='sbnn'", "chains=2", "seed=7", "device='cpu'"]))
    psi = importance_module.knockoff_importance(config, dataset, copies=copies)
    assert [seed for _, seed in method.fits] == [7, 8]  # one fit per restart of the run, the run's seeds
    augmented = method.fits[0][0]
    assert augmented.input_shape == (6 * (copies + 1),) and augmented.x_test.shape == (1000, 6 * (copies + 1))
    torch.testing.assert_close(augmented.x_train[:, :6], dataset.x_train)
    # the knockoff property: X and each copy covary by Σ − S with S diagonal (knockpy's MVR, no groups), so off
    # the diagonal X's copies covary with X as X does, on it less
    covariance = np.cov(augmented.x_train.double().numpy().T)
    off = ~np.eye(6, dtype=bool)
    for k in range(1, copies + 1):
        cross = covariance[:6, 6 * k : 6 * (k + 1)]
        np.testing.assert_allclose(cross[off], sigma[off], atol=0.08)
        assert (np.diag(cross) < 0.9).all()
    # ψ of the stand-in is |corr(column, y)|: row 0 the inputs, row k their k-th copies
    x, y = augmented.x_train.double().numpy(), augmented.y_train.double().numpy()
    correlation = np.abs([np.corrcoef(column, y)[0, 1] for column in x.T])
    np.testing.assert_allclose(psi, correlation.reshape(copies + 1, 6), rtol=1e-6)
    lead = psi[0] - psi[1:].max(axis=0)
    assert lead[0] > 0.2 and lead[3] > 0.2 and np.abs(np.delete(lead, [0, 3])).max() < 0.1


def groups_of(names):
    return [{"group": name, "inputs": [name]} for name in names]


def test_record_selects_by_the_multiple_knockoff_filter():
    psi = np.array([[10, 9, 8, 7, 6, 1], [1, 1, 1, 1, 1, 5], [0, 0, 0, 0, 0, 0]], dtype=float)
    record = importance_module.knockoff_record(groups_of("abcdef"), psi, fdr=0.1, record={})
    assert record["selected"] == list("abcde") and record["not_selected"] == ["f"]  # the filter's hand example
    assert record["rule"] == "knockoff+" and record["copies"] == 2
    assert record["psi_input_and_copies"]["f"] == [1, 5, 0]
    assert importance_module.knockoff_record(groups_of("abcdef"), psi[:2], fdr=0.1, record={})["selected"] == []
    # a group selected selects its inputs
    rows = [{"group": "a + b", "inputs": ["a", "b"]}, *groups_of("cdefg")]
    record = importance_module.knockoff_record(rows, psi, fdr=0.1, record={})
    assert record["selected_groups"] == ["a + b", "c", "d", "e", "f"][:5] and record["selected"][:2] == ["a", "b"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"selection": "lasso"}, "--selection must be one of stability, empirical-null, bayesian-fdr, knockoff"),
        ({"selection": "knockoff", "fdr": 0.0}, "--fdr must lie in \\(0, 1\\)"),
    ],
)
def test_a_bad_selection_is_refused_in_one_line_before_anything_is_read(tmp_path, options, message):
    with pytest.raises(BayesPruneError, match=message):
        importance_module.importance(tmp_path / "no-run", **options)


def test_the_report_names_the_knockoff_selection(tmp_path):
    import json

    from bayesprune.pipeline.report import _importance_files

    psi = np.array([[10, 9, 8, 7, 6, 1], [1, 1, 1, 1, 1, 5], [0, 0, 0, 0, 0, 0]], dtype=float)
    (tmp_path / "selection.json").write_text(
        json.dumps(importance_module.knockoff_record(groups_of("abcdef"), psi, fdr=0.1, record={}))
    )
    lines = _importance_files(tmp_path)
    assert any(
        line.startswith("**Selected inputs (5 of 6):** a, b, c, d, e; removed: f. model-X knockoffs") for line in lines
    )


def test_the_command_line_passes_the_selection_and_refuses_a_bad_one_in_one_line(tmp_path, capsys):
    from bayesprune.cli import main

    assert main(["importance", str(tmp_path / "no-run"), "--selection", "knockoff", "--copies", "0"]) == 2
    assert capsys.readouterr().err.strip() == "bayesprune: error: --copies must be a positive integer, got 0"
    assert main(["importance", str(tmp_path / "no-run"), "--selection", "knockoff"]) == 2  # reached the run directory
    assert "not a run directory" in capsys.readouterr().err


def test_empirical_null_record_selects_the_inputs_whose_psi_stands_out():
    generator = np.random.default_rng(0)
    psi = np.concatenate([[0.2, 0.05, 0.3], np.exp(generator.normal(np.log(0.005), 0.3, size=17))])
    rows = [{"feature": f"x{j}", "psi": float(p), "inclusion_probability": 0.5} for j, p in enumerate(psi)]
    record = importance_module.empirical_null_record(rows, fdr=0.1, restarts=4)
    # 17 irrelevant inputs with log psi ~ N(log 0.005, 0.3²): x0-x2 are 7 or more of their sds above them;
    # on the scale of psi itself their spread is not normal, on its log it is (a scale, not a location)
    assert record["selected"] == ["x0", "x1", "x2"] and len(record["not_selected"]) == 17
    assert record["rule"] == "empirical-null" and record["restarts"] == 4 and record["psi"]["x0"] == 0.2


def test_empirical_null_record_on_log_normal_null_psi_selects_something_in_about_a_tenth_of_data_sets():
    # Monte Carlo oracle: with every input irrelevant the false-discovery rate is P(anything selected), about
    # the level 0.1 for a normal null statistic (tests/analysis/test_selection.py); psi log-normal makes log psi
    # normal. On psi itself the right-skewed null selects something in about half of the data sets.
    generator = torch.Generator().manual_seed(0)
    log_psi = torch.randn(400, 20, generator=generator, dtype=torch.float64) * 0.5 - 4
    records = [
        importance_module.empirical_null_record(
            [{"feature": f"x{j}", "psi": float(value)} for j, value in enumerate(row.exp())], fdr=0.1, restarts=4
        )
        for row in log_psi
    ]
    assert sum(bool(record["selected"]) for record in records) / len(records) < 0.13


def summary_of(groups, record):
    """The printed summary of groups (dicts with ``group``, ``size``, ...) and a selection record."""
    record = {"grouping": "absolute correlation above 0.9 on the training rows", "restarts": 1, **record}
    record["selected_groups"] = record.get("selected_groups", record.get("selected", []))
    return importance_module.Importance([], groups, [], record, []).summary()


@pytest.mark.parametrize("not_selected", [[], ["b"]])
def test_the_summary_says_when_the_bayesian_fdr_rule_selects_every_input(not_selected):
    """A Bayesian FDR selection of every group separates none (saturated inclusion): the printed summary
    says so and names the rule that can; a selection that leaves one out prints no such line."""
    groups = [{"group": name, "size": 1} for name in ("a", "b", "c")]
    selected = [row["group"] for row in groups if row["group"] not in not_selected]
    lines = summary_of(groups, {"rule": "bayesian-fdr", "selected": selected, "not_selected": not_selected})
    assert (
        lines[0]
        == f"selected {len(selected)} of 3 inputs, {len(selected)} of 3 groups (bayesian-fdr): {', '.join(selected)}"
    )
    assert any("--selection empirical-null" in line for line in lines) == (not not_selected)


def test_the_summary_gives_the_tiers_the_restarts_agree_on_and_warns_of_an_unstable_ranking():
    """With several restarts the summary prints :func:`agreed_tiers` of the groups (their restart ranks: b and
    c swap between restarts, a is first in each) and the halves' Spearman, with a warning below 0.9; one
    restart prints no tiers and says that its ranking was not checked."""
    groups = [
        {"group": "a", "size": 1, "rank": 1, "restart_rank_best": 1, "restart_rank_worst": 1},
        {"group": "b + d", "size": 2, "rank": 2, "restart_rank_best": 2, "restart_rank_worst": 3},
        {"group": "c", "size": 1, "rank": 3, "restart_rank_best": 2, "restart_rank_worst": 3},
    ]
    record = {"rule": "empirical-null", "selected": ["a"], "not_selected": ["b", "d", "c"], "restarts": 4}
    lines = summary_of(groups, {**record, "half_spearman": 0.95})
    assert "the 4 restarts agree on these tiers of groups (each orders a tier its own way): [a] > [b + d, c]" in lines
    assert "groups of correlated inputs (absolute correlation above 0.9 on the training rows): b + d" in lines
    assert any("Spearman of the group ranking between the two halves of the restarts 0.950" in line for line in lines)
    assert not any("warning" in line for line in lines)
    assert any("warning: below 0.9" in line for line in summary_of(groups, {**record, "half_spearman": 0.5}))
    lines = summary_of(groups, {**record, "restarts": 1})
    assert not any("tiers" in line for line in lines) and any("one fit" in line for line in lines)


def test_group_knockoffs_score_each_group_by_its_inputs_and_copies_together(method):
    """With groups, the copies are drawn for each group together (S block-diagonal by group: a group's inputs
    covary with each other's copies as with each other) and a group's ψ is the mean of its columns'."""
    pytest.importorskip("knockpy")
    dataset, sigma = table()
    config = RunConfig.from_dict(apply_overrides({}, ["method='sbnn'", "chains=1", "seed=3", "device='cpu'"]))
    groups = [[0, 1], [2], [3], [4, 5]]
    psi = importance_module.knockoff_importance(config, dataset, groups, copies=1)
    augmented = method.fits[0][0]
    x, y = augmented.x_train.double().numpy(), augmented.y_train.double().numpy()
    correlation = np.abs([np.corrcoef(column, y)[0, 1] for column in x.T]).reshape(2, 6)
    expected = np.stack([[row[group].mean() for group in groups] for row in correlation])
    np.testing.assert_allclose(psi, expected, rtol=1e-6)
    # across groups the copies covary with the inputs as the inputs do (Σ − S with S zero off the blocks)
    cross = np.cov(x.T)[:6, 6:]
    np.testing.assert_allclose(cross[0, 2:4], sigma[0, 2:4], atol=0.08)
    np.testing.assert_allclose(cross[4, :4], sigma[4, :4], atol=0.08)
