"""The report's sections on feature importance: the restarts' pooled importance from ``posterior.nc``
with its selection and stability, and the files of ``bayesprune importance`` (groups of inputs beside the
plain network's own importance, its selection and refit)."""

import csv
import json
from pathlib import Path

from bayesprune.analysis.diagnostics import REFIT_START_ATTRIBUTE, restarts_not_learned, restarts_refitted
from bayesprune.analysis.importance import (
    INTERVAL,
    RHAT_WARNING,
    SELECTION,
    STABILITY_RULE,
    STABLE_SPEARMAN,
    agreed_tiers,
    disagreeing_features,
    half_spearman,
    pooled_importance_of,
    stability_selection,
    tiers_text,
)
from bayesprune.analysis.selection import DEFAULT_FDR
from bayesprune.analysis.tables import markdown_table, markdown_text
from bayesprune.core.validation import is_number as _number
from bayesprune.pipeline.reading import reading as _reading


def pooled_importance_sections(run_dir: Path, idata, top: int) -> list:
    """The pooled feature importance of ``posterior.nc``'s restarts: its table, the selection (``selection.json``'s
    of groups, else the default rule per input), R-hat's reading and the ranking's stability."""
    record = _read_selection(run_dir)
    fdr = record["fdr"] if record is not None and "fdr" in record else DEFAULT_FDR
    rows = pooled_importance_of(idata, fdr=fdr)
    rule = _pooled_selection(rows, record, fdr, idata)
    chains = idata.posterior.sizes["chain"]
    return [
        *_importance_sections(rows, chains, top, rule, record),
        *filter(None, [_stability(idata), _refitted(idata, chains), _not_learned(idata, chains)]),
    ]


def _refitted(idata, chains: int) -> str:
    """A note naming the restarts fitted again because their first fit did not learn, and the start they were
    fitted again from."""
    refitted = restarts_refitted(idata)
    if not refitted:
        return ""
    start = idata.sample_stats.attrs.get(REFIT_START_ATTRIBUTE)
    return (
        f"Restarts {', '.join(map(str, refitted))} of {chains} did not learn from the network's start (their error "
        "on the training rows no better than that of a predictor that reads no input) and were fitted again from "
        f"the {start} start; their ψ is the refit's."
    )


def _not_learned(idata, chains: int) -> str:
    """A warning naming the restarts whose fit predicted its training rows no better than the trivial predictor."""
    flagged = restarts_not_learned(idata)
    if not flagged:
        return ""
    return (
        f"**Warning: {len(flagged)} of {chains} restarts did not learn** (chains {', '.join(map(str, flagged))}: "
        "their error on the training rows is no better than that of a predictor that reads no input); their ψ is "
        "noise pooled with the others'."
    )


_IMPORTANCE = [
    "## Feature importance\n\nψ and φ (paper 003, eqs. 3.18–3.19) from `bayesprune importance`: `importance.csv` "
    "(features, with the selection), `selection.json`, `node_importance.csv` (every layer).",
    "![feature importance](importance.png)",
]


def _importance_files(run_dir: Path) -> list:
    """The section on ``bayesprune importance``'s files: its groups of inputs beside the plain network's own
    importance, and the inputs its ``selection.json`` lists unless the pooled restarts' section gives them."""
    record = _read_selection(run_dir)
    if record is None:
        return _IMPORTANCE
    lines = [*_IMPORTANCE, *_group_lines(run_dir, record)]
    if record.get("pooled"):
        return lines
    selected, dropped = record["selected"], record["not_selected"]
    line = (
        f"**Selected inputs ({len(selected)} of {len(selected) + len(dropped)}):** "
        f"{', '.join(markdown_text(name) for name in selected) or 'none'}; removed: "
        f"{', '.join(markdown_text(name) for name in dropped) or 'none'}. {markdown_text(record['description'])}."
    )
    return [*lines, line, *_refit_line(record, selected)]


#: Columns of ``group_importance.csv`` the report shows, the plain network's beside ψ.
_GROUP_COLUMNS = ["group", "psi", "rank", "selected", "plain_permutation", "plain_integrated_gradients"]


def _group_lines(run_dir: Path, record: dict, top: int = 15) -> list:
    """The groups of ``group_importance.csv``, most important first, with the plain network's permutation
    importance and integrated gradients beside ψ, and how their rankings agree."""
    path = run_dir / "group_importance.csv"
    if not path.is_file():
        return []
    with _reading(path), open(path, newline="") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda row: int(row["rank"]))
    columns = [column for column in _GROUP_COLUMNS if column in rows[0]]
    table = [
        {key: (float(row[key]) if key.startswith(("psi", "plain")) else row[key]) for key in columns} for row in rows
    ]
    lines = [
        f"Groups of inputs ({markdown_text(record.get('grouping', 'none'))}), ranked and selected as one input each; "
        f"ψ of a group is the mean over all its inputs' paths. The {min(top, len(rows))} most important of {len(rows)}, "
        "the plain network's permutation importance (rise of the test loss) and integrated gradients (Captum, "
        "test rows) beside ψ:",
        markdown_table(table[:top], columns),
    ]
    if "peers" in record:
        lines.append(markdown_text(record["peers"]["summary"]) + ".")
    return lines


def _read_selection(run_dir: Path):
    """The run's ``selection.json`` (``bayesprune importance``), checked; ``None`` without one."""
    path = run_dir / SELECTION
    if not path.is_file():
        return None
    with _reading(path):
        record = json.loads(path.read_text())
        if not all(isinstance(name, str) for name in [*record["selected"], *record["not_selected"]]):
            raise ValueError("'selected' or 'not_selected' holds something other than names")
        if "fdr" in record and not (_number(record["fdr"]) and 0 <= record["fdr"] < 1):
            raise ValueError("'fdr' is not a number in [0, 1)")
        refit = record.get("refit")
        if refit is not None and not (
            isinstance(refit.get("metric"), str)
            and all(_number(refit.get(key)) for key in ("all_inputs", "selected_inputs"))
        ):
            raise ValueError("'refit' is not a metric and two numbers")
    return record


def _refit_line(record, selected: list) -> list:
    """The plain network refit on the selected inputs beside all of them, when ``selection.json`` holds
    it for this selection."""
    refit = None if record is None or record["selected"] != selected else record.get("refit")
    if refit is None:
        return []
    metric = markdown_text(refit["metric"])
    return [
        f"The plain network of the run's shape refit on the selected inputs alone (the others set to zero): "
        f"{metric} {refit['selected_inputs']:.4g}, against {refit['all_inputs']:.4g} on all inputs."
    ]


def _importance_sections(rows: list, chains: int, top: int, rule: str, record=None) -> list:
    """The pooled feature importance of ``posterior.nc``: its table, the selection (by ``rule``, in words)
    and R-hat's warning."""
    ordered = sorted(rows, key=lambda row: row["rank"])
    selected = [row["feature"] for row in ordered if row["selected"]]
    text = (
        f"Feature importance ψ (eq. 3.18) of the {chains} restart{'s' if chains > 1 else ''} pooled: the mixture of "
        "the fitted posteriors, the same numbers as `importance.csv`. ψ is the restarts' mean; the interval holds "
        f"{INTERVAL:.0%} of the pooled draws of ψ(Z) and every restart's ψ; the restarts' column gives the lowest and highest ψ of a single "
        f"restart, the ranks' column the best and worst rank a single restart gives the feature. The {min(top, len(rows))} most "
        f"important of {len(rows)} features:"
    )
    columns = [
        "feature",
        "psi",
        "psi_low",
        "psi_high",
        "restarts",
        "ranks",
        "r_hat",
        "ess",
        "inclusion_probability",
        "selected",
    ]
    table = [
        {
            **{key: row[key] for key in columns if key in row},
            "restarts": f"{row['restart_low']:.3g}–{row['restart_high']:.3g}",
            "ranks": f"{row['restart_rank_best']}–{row['restart_rank_worst']}",
            "selected": "yes" if row["selected"] else "no",
        }
        for row in ordered[:top]
    ]
    selection = (
        f"**Selected inputs ({len(selected)} of {len(rows)}):** {', '.join(markdown_text(name) for name in selected) or 'none'}. "
        f"{rule}"
    )
    chosen = [row["feature"] for row in rows if row["selected"]]
    return [
        text,
        markdown_table(table, columns),
        selection,
        *_refit_line(record, chosen),
        _restart_agreement(rows, chains),
    ]


def _pooled_selection(rows: list, record, fdr: float, idata) -> str:
    """Mark the pooled rows ``selected`` as ``selection.json`` selects them (``bayesprune importance``, groups)
    or, without it, by the default rule per input (:func:`~bayesprune.analysis.importance.stability_selection`
    of ``idata``'s restarts); returns the rule in words."""
    if record is not None and record.get("pooled"):
        chosen = set(record["selected"])
        rule = (
            f"Rule ({markdown_text(record['rule'])}, level {fdr:g}, on groups of inputs, `bayesprune importance`): "
            f"{markdown_text(record['description'])}."
        )
    else:
        flags, _ = stability_selection(idata["variational"]["psi"].transpose("chain", "feature").values, fdr)
        chosen = {row["feature"] for row, keep in zip(rows, flags) if keep}
        rule = (
            f"Rule (stability, level {fdr:g}, per input; `bayesprune importance` selects groups of correlated "
            f"inputs and writes the plain network's importance beside them): {STABILITY_RULE}."
        )
    for row in rows:
        row["selected"] = row["feature"] in chosen
    return rule


def _stability(idata) -> str:
    """How many restarts are pooled and the Spearman between their two halves' rankings, with a warning."""
    at_p = idata["variational"]["psi"].transpose("chain", "feature").values
    if len(at_p) < 2:
        return ""
    rho = half_spearman(at_p)
    line = (
        f"Ranking stability: {len(at_p)} restarts pooled; the Spearman rank correlation of ψ between the first "
        f"and the second half of them is {rho:.3f}."
    )
    if not rho >= STABLE_SPEARMAN:
        line += (
            f" **Warning: below {STABLE_SPEARMAN}: a run from other seeds would rank the inputs differently; fit "
            "more restarts (`chains`) before reporting this ranking.**"
        )
    return line


def _restart_agreement(rows: list, chains: int) -> str:
    """R-hat's reading for a variational posterior, and the features whose restarts disagree."""
    if chains < 2:
        return (
            "One restart: R-hat and ESS need at least two (`chains`), and the interval is one fit's, which is "
            "narrower than the spread between fits. Use `chains = 4` or more before trusting a ranking."
        )
    meaning = (
        "R-hat compares the spread of ψ between restarts with its spread within each restart's posterior. "
        "For a variational fit it is not a test of MCMC mixing: each restart is an independent optimisation, so "
        "R-hat near 1 says that the restarts found posteriors that agree, and a large R-hat that they reached "
        "different optima (the pooled interval then spans them)."
    )
    meaning += " " + _order_agreement(rows)
    flagged = disagreeing_features(rows)
    if not flagged:
        return f"{meaning} Every feature's R-hat is at most {RHAT_WARNING}."
    return (
        f"{meaning}\n\n**Warning: the restarts disagree (R-hat > {RHAT_WARNING}) on {len(flagged)} of {len(rows)} "
        f"features:** {', '.join(markdown_text(name) for name in flagged)}. Their ranks are not settled; fit more "
        "restarts or longer."
    )


def _order_agreement(rows: list) -> str:
    """The tiers of features the restarts agree on (:func:`~bayesprune.analysis.importance.agreed_tiers`)."""
    tiers = agreed_tiers(rows)
    if len(tiers) == len(rows):
        return f"Every restart ranks all {len(rows)} features in the same order."
    if len(tiers) == 1:
        return "The restarts agree on no set of most important features (the ranks' column)."
    text = tiers_text(tiers, markdown_text)
    return (
        f"The restarts agree on these tiers, in this order, and order the features within a tier each their own "
        f"way: {text}."
    )
