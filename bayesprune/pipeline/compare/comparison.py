"""``bayesprune compare``: every method on one network, data, split and training budget, at each
sparsity budget, beside magnitude pruning of the plain network; a leaderboard of the cells.

A comparison config is an ordinary run config (``[data]``, ``[model]``, ``[train]``, ``[prune]``,
``[baseline]``, …) without ``method``, plus a ``[compare]`` table (:class:`CompareOptions`) and,
optionally, a table per method. Each method's cell is that config with ``method`` set, the method's
table taken from its packaged config ``<method>-<compare.options_from>`` with the comparison's own
``[<method>]`` keys over it, its ``[optim]`` from the same packaged config unless the comparison gives
one, and:

* a method with a sparsity option (``Method.sparsity_option``) fits once per sparsity ``s``, that option set
  to ``s`` and ``prune.sparsities = [0, s]``: cell ``<method>-s<s>-seed<k>``;
* a method without one whose scores prune weights (sBNN, Sparse VD, ``magnitude``) fits once per seed and
  is pruned at every sparsity (``prune.sparsities = [0, *sparsities]``): cell ``<method>-seed<k>``;
* a method without weight-level scores removes units in its fit and is evaluated as fitted (sparsity 0):
  at its sparsity option (``torch-pruning``), MAC option (a cell per ``prune.macs``) or learned width, fine-tuned
  by ``[prune]`` unless its fit fine-tunes (a ``finetune_epochs`` option: unit gates);
* a baseline (``Method.baseline``) always runs where its sparsities mean the comparison's: its plain
  network trained as ``[baseline]`` says, each pruned network fine-tuned ``compare.finetune_epochs``; the
  plain network's metric (``magnitude``'s report) is every row's ``plain_test_error``, so no cell trains
  another (``baseline.enabled = false``).

``compare.variants`` runs a method once per combination of its options' values, rows ``<method>-<value>...``. With
``compare.certify``, a method that certifies masks (:meth:`~bayesprune.methods.Method.certifying`: PBP,
paper 000) gets a cell per sparsity and seed started from every other method's mask fitted on S_P
(``certificate-<method>-s<s>-seed<k>``; its own cells where they start from that mask already,
:meth:`~bayesprune.methods.Method.certified`); its bound fills the method's ``bound`` column.

``compare.cases`` makes several such comparisons one (another network, MAC level or data each, with its own
seeds; :mod:`~bayesprune.pipeline.compare.cases`), their cells named by case.
"""

import copy
import json
from contextlib import ExitStack
from dataclasses import fields, replace
from pathlib import Path

import tomli_w

from bayesprune.core.errors import ConfigError
from bayesprune.core.files import write_text
from bayesprune.methods import Method, available_methods, get_method, stages
from bayesprune.pipeline.compare.cases import merged, start_key
from bayesprune.pipeline.compare.cells import Cell, variant_tables
from bayesprune.pipeline.compare.engines import check_engine, engine_started, run_tracked, to_stderr
from bayesprune.pipeline.compare.equal_macs import at_macs, macs_rows, write_macs_table
from bayesprune.pipeline.compare.grid import check_cells, check_grid_dir, refuse_with_resume
from bayesprune.pipeline.compare.leaderboard import leaderboard_rows, write_leaderboard
from bayesprune.pipeline.compare.options import CompareOptions, load_comparison
from bayesprune.pipeline.compare.tracking import open_tracker
from bayesprune.pipeline.config import RunConfig, load_config, packaged_configs
from bayesprune.pipeline.rundir import out_lock
from bayesprune.pipeline.start import shared_starts

#: What marks a folder as a comparison (beside its ``cells`` folder).
MARKER = "comparison.toml"


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
            "epochs": resolved["baseline"].get("epochs") or resolved["train"]["epochs"],
        }  # an unset baseline.epochs or baseline.lr is no key of the TOML layout
        base["optim"] = {"lr": resolved["baseline"].get("lr") or resolved["optim"]["lr"]}
        prune["finetune_epochs"] = options.finetune_epochs
    elif "optim" not in raw and "optim" in packaged:
        base["optim"] = copy.deepcopy(packaged["optim"])
    base["baseline"] = {**base.get("baseline", {}), "enabled": False}
    if prune.get("level", "weight") not in owner.prune_levels:  # its own level; a MAC budget is of units
        prune["level"] = owner.prune_levels[0]
        prune.pop("macs", None)
    if as_fitted(method) and owner.sparsity_option is None and "finetune_epochs" in owner.Options.__dataclass_fields__:
        prune["finetune_epochs"] = 0  # fine-tuned in its own fit
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
                sparsities, name = [0.0] if fitted else [0.0, sparsity], f"{label}-s{sparsity:g}-seed{seed}"
            else:
                sparsities, name = [0.0] if fitted else [0.0, *options.sparsities], f"{label}-seed{seed}"
            config = {
                **base,
                "method": method,
                "seed": seed,
                method: own,
                "prune": {**base["prune"], "sparsities": sparsities},
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


def comparison_cells(raw: dict, options: CompareOptions, *, seeds=None) -> list:
    """Every cell of the comparison, each config validated (a bad one raises before anything is written):
    with ``compare.cases``, every case's cells (:mod:`~bayesprune.pipeline.compare.cases`), each case narrowed
    to ``seeds`` where given (a case left without seeds has no cells)."""
    if not options.cases:
        return _method_cells(raw, options)
    cells = []
    for case in options.cases:
        own = tuple(seed for seed in case.seeds or options.seeds if seeds is None or seed in seeds)
        if not own:
            continue
        try:
            grid = _method_cells(merged(raw, case.overrides), replace(options, seeds=own, cases=()))
        except ConfigError as error:
            raise ConfigError(f"compare.cases[{case.name}]: {error}") from None
        cells += [replace(cell, name=case.prefix + cell.name, case=case.name) for cell in grid]
    names = [cell.name for cell in cells]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise ConfigError(f"compare.cases: two cases make a cell named {repeated!r}; rename one of them")
    return cells


def started(cells: list, out: Path, raw: dict, options: CompareOptions, *, train: bool = True, status=None) -> list:
    """``cells`` started from one trained network per seed (:func:`~bayesprune.pipeline.start.shared_starts`,
    which tells ``status`` of each it trains), per case where there are cases: each case's network and keys
    (:func:`~bayesprune.pipeline.compare.cases.start_key`)."""
    if not options.cases:
        return shared_starts(cells, out, raw, train=train, status=status)
    out_cells = []
    for case in options.cases:
        own = [cell for cell in cells if cell.case == case.name]
        if own:
            case_raw = merged(raw, case.overrides)
            out_cells += shared_starts(
                own, out, case_raw, train=train, key=start_key(case), status=status, case=case.name
            )
    return out_cells


def _method_cells(raw: dict, options: CompareOptions) -> list:
    """Every cell of one comparison without cases (see the module)."""
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
        for suffix, own in variant_tables(options.variants.get(method, {})):
            label = f"{method}-{suffix}" if suffix else method
            cells += method_cells(raw, options, method, label=label, own=own)
    cells = at_macs(cells)
    if options.certify:
        cells = certificate_cells(raw, options, cells)
    for cell in cells:
        try:
            cell.run_config()
        except ConfigError as error:
            raise ConfigError(f"compare, method {cell.method}: {error}") from None
    return cells


def compare(
    source=None,
    out="runs/compare",
    *,
    methods=None,
    sparsities=None,
    seeds=None,
    jobs: int = 1,
    alone: bool = False,
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
    on ``resume``: cells are added or dropped, a finished cell is read back, never fitted again (with
    ``compare.cases``, ``seeds`` narrows every case for this call only; the comparison keeps its seeds). The
    resolved comparison is written to ``out/comparison.toml`` before the first cell, so that ``resume``
    continues from it (no config or overrides are given then). Before any fit every cell is checked
    (:func:`check_cells`): all refusals in one error. A failing cell is a row with its reason. ``status``
    gets progress lines, ``report(cell, metrics, done, total)`` each finished cell; ``alone`` fits every cell alone
    (:func:`~bayesprune.pipeline.compare.engines.run_cells`: else seeds train together); ``track="mlflow"`` logs to
    ``track_uri`` (:mod:`~bayesprune.pipeline.compare.tracking`); rows start alike (:mod:`~bayesprune.pipeline.start`).
    """
    out = Path(out)
    if resume:
        refuse_with_resume(config=source, set=list(overrides))
    with out_lock(out), ExitStack() as held:  # one writer per --out: a run, a comparison or a sweep
        saved = check_grid_dir(out, MARKER, resume=resume)
        raw, options = load_comparison(str(saved) if saved else source, () if resume else overrides)
        given = {
            key: tuple(value)
            for key, value in (("methods", methods), ("sparsities", sparsities), ("seeds", seeds))
            if value is not None
        }
        narrowed = given.pop("seeds", None) if options.cases else None  # with cases, --seeds narrows this call
        try:
            options = replace(options, **given)
            replace(options, seeds=options.seeds if narrowed is None else narrowed)
        except ConfigError as error:
            raise ConfigError(str(error).replace("compare.", "--", 1)) from None
        cells = comparison_cells(raw, options, seeds=narrowed)
        if not cells:
            raise ConfigError(f"--seeds {' '.join(map(str, narrowed))}: no case of this comparison runs these seeds")
        check_engine(engine, jobs=jobs, address=address)
        folders = check_cells(out, started(cells, out, raw, options, train=False))  # as they will be fitted
        tracker = open_tracker(track, track_uri, out, kind="compare")
        held.enter_context(engine_started(engine, address))  # Ray reached before anything is written
        out.mkdir(parents=True, exist_ok=True)
        cells = started(cells, out, raw, options, status=status or to_stderr)
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
        results = run_tracked(
            cells, folders, tracker, engine=engine, jobs=jobs, alone=alone, report=report, status=status
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
