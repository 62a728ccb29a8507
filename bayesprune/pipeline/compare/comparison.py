"""``bayesprune compare``: every method on one network, data, split and training budget, at each
sparsity budget, beside magnitude pruning of the plain network; a leaderboard of the cells.

A comparison config is an ordinary run config (``[data]``, ``[model]``, ``[train]``, ``[prune]``,
``[baseline]``, …) without ``method``, plus a ``[compare]`` table (:class:`CompareOptions`) and,
optionally, a table per method. Each method's cell is that config with ``method`` set, the method's
table taken from its packaged config ``<method>-<compare.options_from>`` with the comparison's own
``[<method>]`` keys over it, its ``[optim]`` from the same packaged config unless the comparison gives
one, and:

* a method with a sparsity option (its ``Method.sparsity_option``: PFT's ``sparsities``) fits once per sparsity
  ``s`` with that option set to ``s`` and ``prune.droprates = [0, s]``: cell ``<method>-s<s>-seed<k>``;
* a method without one whose scores prune weights (sBNN, Sparse VD) fits once per seed and is pruned
  at every sparsity (``prune.droprates = [0, *sparsities]``): cell ``<method>-seed<k>``; fitting it
  again per sparsity would give the same fit;
* a method that learns its own width (unit gates) fits once per seed: cell ``<method>-seed<k>``, its
  achieved sparsity reported;
* the baseline, ``magnitude``: the plain network trained once per seed (``[baseline]``, as the runner
  trains it), pruned by weight magnitude at every sparsity and fine-tuned ``compare.finetune_epochs``
  epochs with the mask fixed: cell ``magnitude-seed<k>``. Its plain network is the one every row's
  ``plain_test_error`` reports, so the method cells do not train it again (``baseline.enabled = false``).
* at unit level (``prune.level = "unit"``), Torch-Pruning's own structured pruner
  (``compare.torch_pruning``, :mod:`~bayesprune.core.channels`): the same plain network,
  each layer's channels pruned by the fraction of units of each sparsity with Torch-Pruning's magnitude
  or Taylor importance and fine-tuned ``compare.finetune_epochs`` epochs: cell
  ``torch-pruning-<importance>-seed<k>``.

With ``compare.certify``, every method's mask gets a PAC-Bayes certificate (paper 000): per sparsity
and seed, a PBP cell ``certificate-<method>-s<s>-seed<k>`` whose stage 1 is that method fitted on S_P
alone with its own table and optimiser and ``train.epochs`` epochs (``pbp.start_mask``,
:mod:`bayesprune.methods.pbp.start`; the baseline: PBP's magnitude start, which is PBP's own cell
when that starts from magnitude), the rest PBP's own; its bound fills the method's ``bound`` column. A method that learns its own width has none (its mask
removes units; PBP's prior is over weights).
"""

import copy
import json
import math
import sys
import tomllib
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import tomli_w

from bayesprune.core.channels import IMPORTANCES
from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.files import write_text
from bayesprune.core.validation import MAX_COUNT, is_count, is_int, is_number, read_renamed, require
from bayesprune.methods import available_methods, get_method, sparsity_option
from bayesprune.pipeline.compare.cells import Cell
from bayesprune.pipeline.compare.engines import check_engine, run_cells
from bayesprune.pipeline.compare.equal_macs import macs_rows, write_macs_table
from bayesprune.pipeline.compare.leaderboard import leaderboard_rows, write_leaderboard
from bayesprune.pipeline.compare.tracking import open_tracker
from bayesprune.pipeline.config import RunConfig, apply_overrides, load_config, packaged_configs
from bayesprune.pipeline.rundir import out_lock
from bayesprune.pipeline.start import shared_starts

#: The baseline's name among the methods.
MAGNITUDE = "magnitude"
#: The packaged comparison run when no config is given.
DEFAULT = "compare-digits"
#: What marks a folder as a comparison (beside its ``cells`` folder).
MARKER = "comparison.toml"
#: Timed forward passes per row (the median of a thousand is as steady as it gets) and the timed batch's rows.
MAX_LATENCY_REPEATS = 1000
MAX_LATENCY_BATCH = 65536


@dataclass(frozen=True)
class CompareOptions:
    """``[compare]``: what is compared.

    Attributes:
        methods: registered methods and ``"magnitude"`` (default: all of them). The baseline always runs:
            it gives the plain network's error.
        sparsities: the sparsity budgets, distinct fractions of the weights removed, in (0, 1).
        seeds: every cell is fitted from each.
        options_from: each method's table and ``[optim]`` come from its packaged config
            ``<method>-<options_from>`` where there is one.
        configs: method → the packaged config to take them from instead (``{sbnn = "mnist-lenet-300-100"}``).
        finetune_epochs: the magnitude baseline's fine-tuning at each sparsity.
        latency_batch: the batch size of the measured latency.
        latency_repeats: timed forward passes (the median is reported).
        certify: add a PBP cell per method, sparsity and seed, started from the method's mask fitted
            on S_P alone, for a certificate of every method in its ``bound`` column (about doubles the cost).
        budget_epochs: when set (``budget`` before, still read), every method trains this many epochs in all,
            split over its stages in the proportions its config gives them, only the network its row reports
            (PFT its first start mask, saliency its first criterion at the most stages, ProbMask without its own
            magnitude baseline) and ProbMask's t1, t2 scaled with its main stage (:func:`held_to_budget`;
            magnitude: the plain network's ``baseline.epochs`` and ``finetune_epochs``).
        torch_pruning: Torch-Pruning's importances (``"magnitude"``, ``"taylor"``) whose structured pruner
            is a baseline at unit level, one row each; unset: ``["magnitude"]`` at unit level; ``[]``:
            none. Refused at weight level (it removes units).
    """

    methods: tuple | None = None
    sparsities: tuple = (0.5, 0.8, 0.9, 0.95)
    seeds: tuple = (0,)
    options_from: str = "digits"
    configs: dict = field(default_factory=dict)
    finetune_epochs: int = 10
    latency_batch: int = 64
    latency_repeats: int = 30
    certify: bool = False
    budget_epochs: int | None = None
    torch_pruning: tuple | None = None

    def __post_init__(self):
        known = [*(name for name, method in available_methods().items() if not method.baseline), MAGNITUDE]
        methods = known if self.methods is None else self.methods  # unset: all but the baselines; [] refused
        known = [*available_methods(), MAGNITUDE]  # a baseline when named
        require(isinstance(methods, (list, tuple)) and methods, "compare.methods", "be a non-empty list", methods)
        for name in methods:
            require(name in known, "compare.methods", f"contain only methods of {sorted(known)}", name)
        object.__setattr__(self, "methods", tuple(dict.fromkeys(methods)))
        require(
            isinstance(self.sparsities, (list, tuple))
            and len(self.sparsities) > 0
            and all(is_number(s) and 0 < s < 1 for s in self.sparsities)
            and len(set(self.sparsities)) == len(self.sparsities),
            "compare.sparsities",
            "be a non-empty list of distinct numbers in (0, 1)",
            self.sparsities,
        )
        object.__setattr__(self, "sparsities", tuple(sorted({float(s) for s in self.sparsities})))
        require(
            isinstance(self.seeds, (list, tuple))
            and len(self.seeds) > 0
            and all(is_int(s) and 0 <= s < 2**31 for s in self.seeds)
            and len(set(self.seeds)) == len(self.seeds),
            "compare.seeds",
            "be a non-empty list of distinct non-negative integers",
            self.seeds,
        )
        object.__setattr__(self, "seeds", tuple(self.seeds))
        require(isinstance(self.options_from, str), "compare.options_from", "be a string", self.options_from)
        suffixes = {
            name[len(method) + 1 :]
            for name in packaged_configs()
            for method in available_methods()
            if name.startswith(f"{method}-")
        }
        require(
            self.options_from in suffixes,
            "compare.options_from",
            f"name a packaged config suffix <method>-<options_from>, one of {sorted(suffixes)}",
            self.options_from,
        )
        require(
            isinstance(self.configs, dict), "compare.configs", "be a table of method = packaged config", self.configs
        )
        for method, name in self.configs.items():
            require(
                method in available_methods(),
                "compare.configs",
                f"name methods of {sorted(available_methods())}",
                method,
            )
            require(
                isinstance(name, str) and name in packaged_configs(),
                f"compare.configs.{method}",
                "be a packaged config (bayesprune list)",
                name,
            )
            held = load_config(name).method
            require(held == method, f"compare.configs.{method}", f"be {method!r}'s config, not {held!r}'s", name)
        require(
            is_count(self.finetune_epochs, 0),
            "compare.finetune_epochs",
            f"be a non-negative integer up to {MAX_COUNT}",
            self.finetune_epochs,
        )
        require(
            self.budget_epochs is None or is_count(self.budget_epochs),
            "compare.budget_epochs",
            f"be a positive number of epochs up to {MAX_COUNT}",
            self.budget_epochs,
        )
        require(isinstance(self.certify, bool), "compare.certify", "be true or false", self.certify)
        if self.torch_pruning is not None:
            require(
                isinstance(self.torch_pruning, (list, tuple))
                and all(name in IMPORTANCES for name in self.torch_pruning)
                and len(set(self.torch_pruning)) == len(self.torch_pruning),
                "compare.torch_pruning",
                f"be a list of distinct importances of {list(IMPORTANCES)}",
                self.torch_pruning,
            )
            object.__setattr__(self, "torch_pruning", tuple(self.torch_pruning))
        require(
            is_int(self.latency_batch) and 0 < self.latency_batch <= MAX_LATENCY_BATCH,
            "compare.latency_batch",
            f"be a positive integer up to {MAX_LATENCY_BATCH}",
            self.latency_batch,
        )
        require(
            is_int(self.latency_repeats) and 0 < self.latency_repeats <= MAX_LATENCY_REPEATS,
            "compare.latency_repeats",
            f"be a positive integer up to {MAX_LATENCY_REPEATS}",
            self.latency_repeats,
        )


def comparison_configs() -> dict:
    """The packaged comparison configs: name → file."""
    folder = resources.files("bayesprune.pipeline.compare") / "configs"
    return {
        entry.name[:-5]: entry
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


def _read(source: str) -> dict:
    packaged = comparison_configs()
    if source in packaged:
        text, where = packaged[source].read_text(), source
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"unknown comparison config {source!r}: not a file and not one of {sorted(packaged)}")
        text, where = path.read_text(encoding="utf-8"), source
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: invalid TOML ({error})") from None


def load_comparison(source: str | None = None, overrides=()) -> tuple:
    """``(raw, options)``: a comparison config (packaged name or TOML path; default ``compare-digits``)
    with ``section.key=value`` overrides applied, and its validated ``[compare]`` table."""
    raw = apply_overrides(_read(source or DEFAULT), overrides)
    if "method" in raw:
        raise ConfigError("a comparison config has no 'method': it runs compare.methods")
    table = raw.get("compare", {})
    require(isinstance(table, dict), "compare", "be a table", table)
    if "budget" in table:  # budget_epochs' old name ("budget" is a mask's sparsity too, core.pruning.Budget)
        raw["compare"] = table = read_renamed(table, "compare", {"budget": "budget_epochs"})
    known = {f.name for f in fields(CompareOptions)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"unknown config key 'compare.{unknown[0]}' (one of {sorted(known)})")
    return raw, CompareOptions(**table)


def _packaged_raw(name: str) -> dict:
    """The packaged run config ``name`` in TOML layout (every option resolved), or ``{}`` if none."""
    return load_config(name).to_dict() if name in packaged_configs() else {}


def learns_width(method: str) -> bool:
    """Whether ``method`` sets its own sparsity and has no weight-level scores to prune at a budget."""
    return sparsity_option(method) is None and "weight" not in get_method(method).prune_levels


def method_cells(raw: dict, options: CompareOptions, method: str) -> list:
    """The cells of one method (see the module)."""
    registered = set(available_methods())
    base = {
        key: copy.deepcopy(value)
        for key, value in raw.items()
        if key not in ("compare", "description", "seed", "seeds", *registered)
    }
    prune = dict(base.get("prune", {}))
    cells = []
    if method == MAGNITUDE:
        finetune = options.finetune_epochs
        if options.budget_epochs is not None:
            plain = base.get("baseline", {}).get("epochs") or _resolved(base)["train"]["epochs"]
            split = split_epochs(
                options.budget_epochs, {"baseline.epochs": plain, "compare.finetune_epochs": finetune}, MAGNITUDE
            )
            base["baseline"] = {**base.get("baseline", {}), "epochs": split["baseline.epochs"]}
            finetune = split["compare.finetune_epochs"]
        for seed in options.seeds:
            config = {**base, "seed": seed, "description": "compare: the plain network, pruned by magnitude"}
            cells.append(
                Cell(
                    name=f"{MAGNITUDE}-seed{seed}",
                    kind="magnitude",
                    config=config,
                    method=MAGNITUDE,
                    seed=seed,
                    sparsities=options.sparsities,
                    finetune_epochs=finetune,
                )
            )
        return cells
    packaged = _packaged_raw(options.configs.get(method, f"{method}-{options.options_from}"))
    table = {**packaged.get(method, {}), **raw.get(method, {})}
    if "optim" not in raw and "optim" in packaged:
        base["optim"] = copy.deepcopy(packaged["optim"])
    base["baseline"] = {**base.get("baseline", {}), "enabled": False}
    if options.budget_epochs is not None:
        table = held_to_budget(base, table, method, options.budget_epochs)
    option = sparsity_option(method)
    points = [None] if option is None else list(options.sparsities)
    for sparsity in points:
        for seed in options.seeds:
            own = dict(table)
            if sparsity is not None:
                listed = isinstance(getattr(get_method(method).Options(), option), (list, tuple))  # PFT's sparsities
                own[option] = [sparsity] if listed else sparsity
                droprates, name = [0.0, sparsity], f"{method}-s{sparsity:g}-seed{seed}"
            elif learns_width(method):
                droprates, name = [0.0], f"{method}-seed{seed}"
                prune["level"] = get_method(method).prune_levels[0]
            else:
                droprates, name = [0.0, *options.sparsities], f"{method}-seed{seed}"
            config = {
                **base,
                "method": method,
                "seed": seed,
                method: own,
                "prune": {**prune, "droprates": droprates},
                "description": f"compare: {method}" + ("" if sparsity is None else f" at sparsity {sparsity:g}"),
            }
            cells.append(
                Cell(
                    name=name,
                    kind="run",
                    config=config,
                    method=method,
                    seed=seed,
                    sparsity=sparsity,
                    sparsities=() if learns_width(method) else tuple(options.sparsities),
                )
            )
    return cells


def _resolved(config: dict) -> dict:
    """``config`` (TOML layout) with every default filled in."""
    return RunConfig.from_dict(copy.deepcopy(config)).to_dict()


def held_to_budget(base: dict, table: dict, method: str, budget: int) -> dict:
    """``compare.budget_epochs``: ``method``'s stages (``train.epochs``, its main stage, and every ``*_epochs``
    option of its table) given ``budget`` epochs in all, in the proportions its config gives them
    (:func:`split_epochs`); sets ``base``'s ``train.epochs`` and returns the method's table, cut to the
    training of the one network its row reports (:meth:`~bayesprune.methods.Method.one_network`) and with
    the epochs its options name inside the main stage scaled with it
    (:meth:`~bayesprune.methods.Method.main_stage_scaled`)."""
    owner = get_method(method)
    table = owner.one_network(dict(table))
    resolved = _resolved({**base, "method": method, method: table})
    if resolved["train"].get("steps") is not None:
        raise ConfigError("compare.budget_epochs counts epochs: remove train.steps")
    stages = {
        "train.epochs": resolved["train"]["epochs"],
        **{
            f"{method}.{key}": value
            for key, value in resolved[method].items()
            if key.endswith("_epochs") and is_int(value)
        },
    }
    split = split_epochs(budget, stages, method)
    epochs = split.pop("train.epochs")
    base["train"] = {**base.get("train", {}), "epochs": epochs}
    table = {**table, **{key.partition(".")[2]: value for key, value in split.items()}}
    return owner.main_stage_scaled(table, epochs / stages["train.epochs"])


def split_epochs(budget: int, stages: dict, owner: str) -> dict:
    """``budget`` epochs over ``stages`` (key → epochs) in their proportions: one to each stage that
    runs, the rest by largest remainder, so that they sum to ``budget`` exactly; a stage of 0 stays off."""
    running = {key: epochs for key, epochs in stages.items() if epochs > 0}
    if budget < len(running):
        raise ConfigError(
            f"compare.budget_epochs = {budget}: fewer epochs than the {len(running)} training stages of {owner} "
            f"({', '.join(running)})"
        )
    total = sum(running.values())
    shares = {key: (budget - len(running)) * epochs / total for key, epochs in running.items()}
    given = {key: 1 + math.floor(share) for key, share in shares.items()}
    largest = sorted(running, key=lambda key: shares[key] - math.floor(shares[key]), reverse=True)
    for key in largest[: budget - sum(given.values())]:
        given[key] += 1
    return {**stages, **given}


def structured_cells(options: CompareOptions, baseline: list) -> list:
    """Torch-Pruning's cells (``compare.torch_pruning``): the magnitude ``baseline`` cells' plain network
    and fine-tuning, pruned by Torch-Pruning's structured pruner instead."""
    level = baseline[0].run_config().prune.level
    importances = options.torch_pruning
    if importances is None:
        importances = IMPORTANCES[:1] if level == "unit" else ()
    elif importances and level != "unit":
        raise ConfigError(
            "compare.torch_pruning: Torch-Pruning's structured pruner removes units; it is a baseline "
            'at prune.level = "unit" only (give [] or set prune.level)'
        )
    return [
        replace(
            cell,
            name=f"torch-pruning-{importance}-seed{cell.seed}",
            kind="torch-pruning",
            method=f"torch-pruning-{importance}",
            config={**cell.config, "description": f"compare: the plain network, Torch-Pruning's {importance} pruner"},
        )
        for importance in importances
        for cell in baseline
    ]


def certificate_cells(raw: dict, options: CompareOptions, method: str) -> list:
    """PBP's cells started from ``method``'s mask fitted on S_P, one per sparsity and seed (see the module)."""
    cells = []
    for pbp in method_cells(raw, options, "pbp"):
        config = copy.deepcopy(pbp.config)
        if method == MAGNITUDE:
            config["pbp"]["start_mask"] = "magnitude"
        else:
            packaged = _packaged_raw(options.configs.get(method, f"{method}-{options.options_from}"))
            table = {**packaged.get(method, {}), **raw.get(method, {})}
            table.pop(sparsity_option(method), None)  # PBP sets it to its own sparsity
            optim = raw.get("optim", packaged.get("optim", {}))
            config["pbp"].update(
                start_mask=method,
                start_options=table,
                start_optim=copy.deepcopy(optim),
                prior_epochs=config.get("train", {}).get("epochs", 200),
            )
        config["description"] = f"compare: PBP's certificate for {method}'s mask at sparsity {pbp.sparsity:g}"
        cells.append(
            replace(
                pbp,
                name=f"certificate-{method}-s{pbp.sparsity:g}-seed{pbp.seed}",
                config=config,
                certifies=(method,),
                row=False,
            )
        )
    return cells


def at_macs(cells: list) -> list:
    """``prune.macs``: a cell of a method that prunes to a MAC fraction in its fit (its
    :attr:`~bayesprune.methods.Method.macs_option`) becomes one cell per target, that option set to it and
    ``prune.macs`` to it alone, so that every row stands at the targets' MACs (a method without one is
    cut to them after its fit); its cells at other sparsities, which would give the same fit, are dropped."""
    out, seen = [], set()
    for cell in cells:
        option = get_method(cell.method).macs_option if cell.kind == "run" else None
        targets = cell.config.get("prune", {}).get("macs")
        if option is None or targets is None:
            out.append(cell)
            continue
        for target in targets if isinstance(targets, (list, tuple)) else [targets]:
            if (cell.method, target, cell.seed) in seen:
                continue
            seen.add((cell.method, target, cell.seed))
            config = copy.deepcopy(cell.config)
            config[cell.method][option] = target
            config["prune"].update(macs=[target], droprates=[0.0])
            name = f"{cell.method}-m{target:g}-seed{cell.seed}"
            out.append(replace(cell, name=name, config=config, sparsity=None, sparsities=()))
    return out


def comparison_cells(raw: dict, options: CompareOptions) -> list:
    """Every cell of the comparison, each config validated (a bad one raises before anything is written)."""
    methods = [method for method in options.methods if method != MAGNITUDE]
    cells = [cell for method in [MAGNITUDE, *methods] for cell in method_cells(raw, options, method)]
    cells += structured_cells(options, [cell for cell in cells if cell.method == MAGNITUDE])
    cells = at_macs(cells)
    if options.certify:
        certified = [MAGNITUDE, *(method for method in methods if method != "pbp" and not learns_width(method))]
        own = [
            cell for cell in cells if cell.method == "pbp" and cell.run_config().method_options.start_mask == MAGNITUDE
        ]
        if own:  # PBP's own cells already start from magnitude pruning's mask: they certify the baseline
            cells = [replace(cell, certifies=(MAGNITUDE,)) if cell in own else cell for cell in cells]
            certified.remove(MAGNITUDE)
        cells += [cell for method in certified for cell in certificate_cells(raw, options, method)]
    for cell in cells:
        try:
            cell.run_config()
        except ConfigError as error:
            raise ConfigError(f"compare, method {cell.method}: {error}") from None
    return cells


def grid_folder(name: str, out: str | None, resume: str | None) -> Path:
    """The folder of ``bayesprune compare`` or ``sweep`` (``name``): ``--out`` (a new grid) or ``--resume``
    (one to continue), exactly one of them, naming a folder."""
    if (out is None) == (resume is None):
        raise BayesPruneError(f"{name} needs --out DIR (a new {name}) or --resume DIR (continue one), not both")
    if "" in (out, resume):
        raise BayesPruneError(f"{'--out' if out == '' else '--resume'} is empty; name a folder")
    return Path(resume or out)


def exit_status(rows: list, table: Path) -> int:
    """A finished grid's exit status: 1, after one line on stderr, where a row has a failed cell, else 0."""
    failed = [row for row in rows if row.get("failed")]
    if failed:
        message = f"{len(failed)} of {len(rows)} rows have a failed cell (reasons in {table}); run the same grid with --resume to fit them again"
        print(f"bayesprune: {message}", file=sys.stderr)
    return 1 if failed else 0


def check_grid_dir(out: Path, marker: str, *, resume: bool) -> Path | None:
    """Refuse an ``out`` a grid may not use; return the marker file to continue from when ``resume``.

    A new grid needs a missing or empty folder (a finished one is never overwritten); ``--resume``
    needs the folder a grid of this kind started, its ``marker`` written before the first cell."""
    kind = marker.partition(".")[0]
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise BayesPruneError(f"{'--resume' if resume else '--out'} {out}: exists and is not a directory")
    if resume:
        if (out / marker).is_symlink():
            raise BayesPruneError(f"--resume {out}: its {marker} is a symbolic link; it is never followed")
        if not (out / marker).is_file():
            raise BayesPruneError(f"--resume {out}: holds no {marker}, so it is not a {kind} to continue")
        return out / marker
    if out.is_dir() and any(out.iterdir()):
        if (out / marker).is_file():
            raise BayesPruneError(
                f"--out {out}: holds a {kind}; continue it with --resume {out}, or give a new directory"
            )
        raise BayesPruneError(f"--out {out}: is not empty; give a new directory")
    return None


def refuse_with_resume(**given):
    """A grid continued with ``--resume`` keeps its config: refuse what would change it."""
    named = [name for name, value in given.items() if value]
    if named:
        flag = named[0] if named[0] == "config" else "--" + named[0].replace("_", "-")
        raise BayesPruneError(f"--resume continues a grid with its own config; {flag} cannot be given with it")


def check_cells(out: Path, cells: list) -> list:
    """The cells' folders, after refusing, before any fit: a ``cells`` folder or a cell folder that is a
    link or a file, a finished cell whose files are tampered or hold another fit (naming the file or
    the key), and every cell the checks of ``bayesprune run`` refuse, all of them, one line each."""
    from bayesprune.pipeline.compare.cells import check_folder, finished, refusal

    folder = out / "cells"
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise BayesPruneError(f"{folder}: is not a directory (a link or a file); it is never followed")
    folders = [folder / cell.name for cell in cells]
    for cell, path in zip(cells, folders):
        check_folder(cell, path)
    refused, datasets = {}, {}
    for cell, path in zip(cells, folders):
        why = None if finished(path) else refusal(cell, datasets)
        if why:
            refused.setdefault((cell.method, why), []).append(cell.name)
    if refused:
        raise CellsRefused(
            [
                f"method {method} refuses {len(names)} cell{'s' * (len(names) > 1)} "
                f"({', '.join(names[:3])}{', …' * (len(names) > 3)}): {why}"
                for (method, why), names in refused.items()
            ]
        )
    return folders


class CellsRefused(BayesPruneError):
    """Every refusal of a grid's cells, one line each in ``lines`` (the command line prints each)."""

    def __init__(self, lines):
        super().__init__("; ".join(lines))
        self.lines = list(lines)


def compare(
    source=None,
    out="runs/compare",
    *,
    methods=None,
    sparsities=None,
    seeds=None,
    jobs: int = 1,
    engine: str = "local",
    address=None,
    overrides=(),
    track=None,
    track_uri=None,
    resume: bool = False,
    report=None,
    status=None,
) -> list:
    """Run a comparison into ``out`` (a new folder), or continue it (``resume=True``), and write its
    leaderboard; returns its rows.

    ``methods``, ``sparsities`` and ``seeds`` replace the config's ``[compare]`` lists when given, also
    on ``resume``: cells are added or dropped, a finished cell is read back, never fitted again. The
    resolved comparison is written to ``out/comparison.toml`` before the first cell, so that ``resume``
    continues from it (no config or overrides are given then). Before any fit every cell is checked
    (:func:`check_cells`): all refusals in one error. A failing cell is a row with its reason. ``status``
    gets progress lines, ``report(cell, metrics, done, total)`` each finished cell; ``track="mlflow"`` logs to
    ``track_uri`` (:mod:`~bayesprune.pipeline.compare.tracking`); rows start alike (:mod:`~bayesprune.pipeline.start`).
    """
    out = Path(out)
    if resume:
        refuse_with_resume(config=source, set=list(overrides))
    with out_lock(out):  # one writer per --out: a run, a comparison or a sweep
        saved = check_grid_dir(out, MARKER, resume=resume)
        raw, options = load_comparison(str(saved) if saved else source, () if resume else overrides)
        given = {
            key: tuple(value)
            for key, value in (("methods", methods), ("sparsities", sparsities), ("seeds", seeds))
            if value is not None
        }
        if given:
            try:
                options = replace(options, **given)
            except ConfigError as error:
                raise ConfigError(str(error).replace("compare.", "--", 1)) from None
        cells = comparison_cells(raw, options)
        check_engine(engine, jobs=jobs, address=address)
        folders = check_cells(out, cells)
        tracker = open_tracker(track, track_uri, out, kind="compare")
        out.mkdir(parents=True, exist_ok=True)
        cells = shared_starts(cells, out, raw)
        # --resume with other lists: the marker holds them from now on (cells dropped keep their folders)
        write_text(
            out / MARKER,
            tomli_w.dumps(
                {
                    **raw,
                    "compare": {
                        **raw.get("compare", {}),
                        "methods": list(options.methods),
                        "sparsities": list(options.sparsities),
                        "seeds": list(options.seeds),
                    },
                }
            ),
        )
        results = run_cells(
            cells,
            folders,
            engine=engine,
            jobs=jobs,
            address=address,
            status=status,
            report=report if tracker is None else tracker.reporter(report or (lambda *args: None)),
        )
        rows = leaderboard_rows(cells, folders, options, results)
        write_leaderboard(out, rows)
        write_text(out / "leaderboard.json", json.dumps(rows, indent=1) + "\n")
        if raw.get("prune", {}).get("macs") is not None:
            macs = macs_rows(cells, folders, options, results)
            write_macs_table(out, macs)
            write_text(out / "leaderboard-macs.json", json.dumps(macs, indent=1) + "\n")
        if tracker is not None:
            tracker.finish([MARKER, "leaderboard.md", "leaderboard.csv", "leaderboard.json", "leaderboard.png"])
        return rows
