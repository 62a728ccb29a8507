"""``bayesprune compare``: every method on one network, data, split and training budget, at each
sparsity budget, beside magnitude pruning of the plain network; a leaderboard of the cells.

A comparison config is an ordinary run config (``[data]``, ``[model]``, ``[train]``, ``[prune]``,
``[baseline]``, …) without ``method``, plus a ``[compare]`` table (:class:`CompareOptions`) and,
optionally, a table per method. Each method's cell is that config with ``method`` set, the method's
table taken from its packaged config ``<method>-<compare.options_from>`` with the comparison's own
``[<method>]`` keys over it, its ``[optim]`` from the same packaged config unless the comparison gives
one, and:

* a method with a sparsity option (``Method.sparsity_option``) fits once per sparsity ``s``, that option set
  to ``s`` and ``prune.droprates = [0, s]``: cell ``<method>-s<s>-seed<k>``;
* a method without one whose scores prune weights (sBNN, Sparse VD, ``magnitude``) fits once per seed and
  is pruned at every sparsity (``prune.droprates = [0, *sparsities]``): cell ``<method>-seed<k>``;
* a method without weight-level scores removes units in its fit and is evaluated as fitted (droprate 0):
  at its sparsity option (``torch-pruning``), or at the width it learned (unit gates; fine-tuned in its fit);
* a baseline (``Method.baseline``) always runs where its sparsities mean the comparison's: its plain
  network trained as ``[baseline]`` says, each pruned network fine-tuned ``compare.finetune_epochs``; the
  plain network's metric (``magnitude``'s report) is every row's ``plain_test_error``, so no cell trains
  another (``baseline.enabled = false``).

``compare.variants`` runs a method once per value of one option, rows ``<method>-<value>``. With
``compare.certify``, a method that certifies masks (:meth:`~bayesprune.methods.Method.certifying`: PBP,
paper 000) gets a cell per sparsity and seed started from every other method's mask fitted on S_P
(``certificate-<method>-s<s>-seed<k>``; its own cells where they start from that mask already,
:meth:`~bayesprune.methods.Method.certified`); its bound fills the method's ``bound`` column.
"""

import copy
import json
import sys
import tomllib
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import tomli_w

from bayesprune.core.errors import BayesPruneError, ConfigError
from bayesprune.core.files import write_text
from bayesprune.core.validation import MAX_COUNT, is_count, is_int, is_number, read_renamed, require
from bayesprune.methods import Method, available_methods, get_method, stages
from bayesprune.pipeline.compare.cells import Cell
from bayesprune.pipeline.compare.engines import check_engine, run_cells
from bayesprune.pipeline.compare.equal_macs import at_macs, macs_rows, write_macs_table
from bayesprune.pipeline.compare.leaderboard import leaderboard_rows, write_leaderboard
from bayesprune.pipeline.compare.tracking import open_tracker
from bayesprune.pipeline.config import RunConfig, apply_overrides, load_config, packaged_configs
from bayesprune.pipeline.rundir import out_lock
from bayesprune.pipeline.start import shared_starts

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
        methods: registered methods (default: all of them whose sparsities mean the comparison's). The
            baselines always run (``magnitude`` gives the plain network's error).
        sparsities: the sparsity budgets, distinct fractions of the weights removed, in (0, 1).
        seeds: every cell is fitted from each.
        options_from: each method's table and ``[optim]`` come from its packaged config
            ``<method>-<options_from>`` where there is one.
        configs: method → the packaged config to take them from instead (``{sbnn = "mnist-lenet-300-100"}``).
        finetune_epochs: the baselines' fine-tuning of each pruned network (their ``prune.finetune_epochs``).
        latency_batch: the batch size of the measured latency.
        latency_repeats: timed forward passes (the median is reported).
        certify: add a PBP cell per method, sparsity and seed, started from the method's mask fitted
            on S_P alone, for a certificate of every method in its ``bound`` column (about doubles the cost).
        budget_epochs: when set (``budget`` before, still read), every method trains this many epochs in all,
            split over its stages in the proportions its config gives them, only the network its row reports
            (PFT its first start mask, saliency its first criterion at the most stages, ProbMask without its own
            magnitude baseline) and ProbMask's t1, t2 scaled with its main stage (:func:`held_to_budget`;
            ``prune.finetune_epochs`` is a stage: the baselines' plain network and fine-tuning).
        variants: method → ``{option = [values]}``: the method runs once per value, each a row named
            ``<method>-<value>``; an empty list: the method does not run.
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
    variants: dict = field(default_factory=dict)

    def __post_init__(self):
        known = list(available_methods())
        if self.methods is not None:  # unset: every method; [] refused
            require(
                isinstance(self.methods, (list, tuple)) and self.methods,
                "compare.methods",
                "be a non-empty list",
                self.methods,
            )
            for name in self.methods:
                require(name in known, "compare.methods", f"contain only methods of {sorted(known)}", name)
            object.__setattr__(self, "methods", tuple(dict.fromkeys(self.methods)))
        _check_variants(self.variants, known)
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


def _check_variants(variants, known):
    """``compare.variants``: method → one option of its table → a list of distinct values."""
    require(isinstance(variants, dict), "compare.variants", "be a table of method = {option = [values]}", variants)
    for method, table in variants.items():
        require(method in known, "compare.variants", f"name methods of {sorted(known)}", method)
        names = {f.name for f in fields(get_method(method).Options)}
        ok = isinstance(table, dict) and len(table) == 1 and set(table) <= names
        require(ok, f"compare.variants.{method}", f"be a table of one option of [{method}] and its values", table)
        values = next(iter(table.values()))
        ok = isinstance(values, list) and len({json.dumps(v) for v in values}) == len(values)
        require(ok, f"compare.variants.{method}", "give a list of distinct values", values)


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


def as_fitted(method: str) -> bool:
    """Whether ``method`` has no weight-level scores: its fit removes units (at its sparsity option, or to
    the width it learns), and its row is its network as fitted."""
    return "weight" not in get_method(method).prune_levels


def _base(raw: dict, options: CompareOptions, method: str) -> tuple:
    """``(base, table)``: the comparison's shared sections for ``method``'s cells (see the module) and its table."""
    owner = get_method(method)
    registered = set(available_methods())
    base = {
        key: copy.deepcopy(value)
        for key, value in raw.items()
        if key not in ("compare", "description", "seed", "seeds", *registered)
    }
    packaged = _packaged_raw(options.configs.get(method, f"{method}-{options.options_from}"))
    table = {**packaged.get(method, {}), **raw.get(method, {})}
    prune = dict(base.get("prune", {}))
    if owner.baseline:  # the plain network as [baseline] says, its pruned networks fine-tuned
        resolved = _resolved(base)
        base["train"] = {
            **base.get("train", {}),
            "epochs": resolved["baseline"]["epochs"] or resolved["train"]["epochs"],
        }
        base["optim"] = {"lr": resolved["baseline"]["lr"] or resolved["optim"]["lr"]}
        prune["finetune_epochs"] = options.finetune_epochs
    elif "optim" not in raw and "optim" in packaged:
        base["optim"] = copy.deepcopy(packaged["optim"])
    base["baseline"] = {**base.get("baseline", {}), "enabled": False}
    if prune.get("level", "weight") not in owner.prune_levels:  # its own level; a MAC budget is of units
        prune["level"] = owner.prune_levels[0]
        prune.pop("macs", None)
    if as_fitted(method) and owner.sparsity_option is None:  # learned width: fine-tuned in its own fit
        prune["finetune_epochs"] = 0
    base["prune"] = prune
    return base, table


def method_cells(raw: dict, options: CompareOptions, method: str, *, label: str = "", own: dict = None) -> list:
    """The cells of one method (see the module); ``own``: options over its table (a variant's), ``label``
    its rows' name."""
    owner, label = get_method(method), label or method
    base, table = _base(raw, options, method)
    table = {**table, **(own or {})}
    if options.budget_epochs is not None:
        table = held_to_budget(base, table, method, options.budget_epochs)
    option, fitted = owner.sparsity_option, as_fitted(method)
    cells = []
    for sparsity in [None] if option is None else list(options.sparsities):
        for seed in options.seeds:
            own = dict(table)
            if sparsity is not None:
                listed = isinstance(getattr(owner.Options(), option), (list, tuple))  # PFT's sparsities
                own[option] = [sparsity] if listed else sparsity
                droprates, name = [0.0] if fitted else [0.0, sparsity], f"{label}-s{sparsity:g}-seed{seed}"
            else:
                droprates, name = [0.0] if fitted else [0.0, *options.sparsities], f"{label}-seed{seed}"
            config = {
                **base,
                "method": method,
                "seed": seed,
                method: own,
                "prune": {**base["prune"], "droprates": droprates},
                "description": f"compare: {label}" + ("" if sparsity is None else f" at sparsity {sparsity:g}"),
            }
            cells.append(
                Cell(
                    name=name,
                    config=config,
                    method=method,
                    label=label,
                    seed=seed,
                    sparsity=sparsity,
                    sparsities=() if fitted else tuple(options.sparsities),
                    as_fitted=fitted,
                )
            )
    return cells


def _resolved(config: dict) -> dict:
    """``config`` (TOML layout) with every default filled in."""
    return RunConfig.from_dict(copy.deepcopy(config)).to_dict()


def held_to_budget(base: dict, table: dict, method: str, budget: int) -> dict:
    """``compare.budget_epochs``: ``method``'s declared stages (:mod:`bayesprune.methods.stages`: the main
    stage, each stage its options declare, and ``prune.finetune_epochs``, each pruned network's fine-tuning)
    given ``budget`` epochs in all, in the proportions its config gives them; sets ``base``'s
    ``train.epochs`` and ``prune.finetune_epochs`` and returns the method's table with the options its typed
    options changed (:func:`~bayesprune.methods.stages.held_to_budget`) written over it."""
    resolved = RunConfig.from_dict(copy.deepcopy({**base, "method": method, method: table}))
    if resolved.train.steps is not None:
        raise ConfigError("compare.budget_epochs counts epochs: remove train.steps")
    given = resolved.method_options
    options, epochs, finetune = stages.held_to_budget(
        given, resolved.train.epochs, resolved.prune.finetune_epochs, budget, owner=method
    )
    base["train"] = {**base.get("train", {}), "epochs": epochs}
    base["prune"] = {**base.get("prune", {}), "finetune_epochs": finetune}
    changed = {
        f.name: getattr(options, f.name) for f in fields(options) if getattr(options, f.name) != getattr(given, f.name)
    }
    return {**table, **{name: list(value) if isinstance(value, tuple) else value for name, value in changed.items()}}


def certificate_cells(raw: dict, options: CompareOptions, cells: list) -> list:
    """``cells`` with, for each method that certifies others' masks (:meth:`~bayesprune.methods.Method.certifying`),
    its own cells marked as certifying the mask they start from, and a cell of it per sparsity and seed
    for every other method's rows (see the module)."""
    cells = list(cells)
    for name, certifier in available_methods().items():
        if certifier.certifying is Method.certifying:
            continue
        owner = certifier()
        rows = dict.fromkeys((cell.method, cell.label) for cell in cells if cell.row and cell.method != name)
        for method, label in rows:
            own = [
                i
                for i, cell in enumerate(cells)
                if cell.method == name and owner.certified(cell.config[name]) == method
            ]
            for i in own:
                cells[i] = replace(cells[i], certifies=(*cells[i].certifies, label))
            if own:
                continue
            packaged = _packaged_raw(options.configs.get(method, f"{method}-{options.options_from}"))
            mask_table = {**packaged.get(method, {}), **raw.get(method, {})}
            mask_optim = raw.get("optim", packaged.get("optim", {}))
            for cell in method_cells(raw, options, name):
                config = copy.deepcopy(cell.config)
                table = owner.certifying(
                    config[name],
                    method,
                    mask_table=mask_table,
                    mask_optim=mask_optim,
                    epochs=config.get("train", {}).get("epochs", 200),
                )
                if table is None:
                    break
                at = "" if cell.sparsity is None else f"-s{cell.sparsity:g}"
                config.update({name: table, "description": f"compare: {name}'s certificate for {label}'s mask{at}"})
                cells.append(
                    replace(
                        cell,
                        name=f"certificate-{label}{at}-seed{cell.seed}",
                        config=config,
                        certifies=(label,),
                        row=False,
                    )
                )
    return cells


def comparison_cells(raw: dict, options: CompareOptions) -> list:
    """Every cell of the comparison, each config validated (a bad one raises before anything is written)."""
    level = _resolved({key: value for key, value in raw.items() if key in ("prune",)})["prune"]["level"]
    baselines = [name for name, method in available_methods().items() if method.baseline]
    cells = []
    for method in dict.fromkeys([*baselines, *(options.methods or available_methods())]):
        owner = get_method(method)
        if owner.sparsity_option is not None and level not in owner.prune_levels:
            if options.methods is not None and method in options.methods:
                raise ConfigError(
                    f"compare.methods: {method} prunes at prune.level = {owner.prune_levels[0]!r} only; its "
                    f"sparsities are not this comparison's (prune.level = {level!r})"
                )
            continue
        (option, values), *_ = options.variants.get(method, {None: [None]}).items()
        for value in values:
            label = method if option is None else f"{method}-{value}"
            cells += method_cells(raw, options, method, label=label, own={} if option is None else {option: value})
    cells = at_macs(cells)
    if options.certify:
        cells = certificate_cells(raw, options, cells)
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
                        **({} if options.methods is None else {"methods": list(options.methods)}),
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
