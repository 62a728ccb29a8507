"""``bayesprune export`` as a library call: a fitted network written as a file that runs with torch alone
(``torch.export``) and a trainable file, smaller where the method or a :class:`~bayesprune.core.pruning.Budget`
removed units, with its test metric, size, MACs and latency beside the dense network's."""

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.loop import check_stop
from bayesprune.core.pruning import Budget
from bayesprune.core.tasks import chunks
from bayesprune.core.validation import MAX_COUNT, is_count, read_renamed
from bayesprune.pipeline.config import parse_override
from bayesprune.pipeline.finetune import FineTuning

#: The most timed forward passes ``repeats`` may ask for per batch size and device (more measures nothing new).
MAX_REPEATS = 10_000
#: The formats an export writes: ``pt2`` (``torch.export``, always written) and ``onnx`` (``OUT_STEM.onnx`` beside it).
FORMATS = ("pt2", "onnx")


@dataclass
class Exported:
    """What :func:`export_run` wrote and measured.

    Attributes:
        report: the measurements (``bayesprune export --json`` prints them): the budget, the file's test
            metric beside the run's and the method's own masked prediction, parameters, MACs and latency
            of the dense and the exported network, the paths written.
        compared_inputs: test inputs the exported network was checked against the masked dense one on.
        no_trainable_file: why the trainable file could not be written, or ``None``.
    """

    report: dict
    compared_inputs: int
    no_trainable_file: str | None = None

    def summary(self) -> list:
        """The lines ``bayesprune export`` prints."""
        report = self.report
        name = "test_error" if "test_error" in report else "test_rmse"
        own, run_value, devices = (
            report[f"method_{name}"],
            report[f"run_{name}"],
            list(report["dense"]["latency_seconds"]),
        )
        what = "the method's own network" if report["budget"] is None else f"budget {report['budget']}"
        lines = [
            f"{what}; removed from the dense network: {_removed_text(report['removed_units'])} "
            f"(dead units among them: {sum(report['removed_dead_units'].values())}); "
            + (
                "batch-norm statistics estimated again for the masked network; "
                if report["recalibrated_statistics"]
                else ""
            )
            + f"max |exported - masked dense| on {self.compared_inputs} test inputs: {report['max_abs_difference_to_masked']:.2e}",
            f"{name} of the written file: {report[name]:.4g} (the run's: {'unknown' if run_value is None else f'{run_value:.4g}'}"
            + ("" if own is None else f"; the method's own prediction with the same weights removed: {own:.4g}")
            + ")",
            f"{'':<28}{'dense':>14}{'exported':>14}{'ratio':>8}   (dense: the network the config builds, "
            "before any unit left while training)",
        ]
        if report["finetune_epochs"]:
            choice = report.get("finetune_choice")
            rate = "" if choice is None else f" at rate {choice['finetune_lr']:g} (chosen on held-out training rows)"
            epochs = report["finetune_epochs"]
            lines.insert(
                2,
                f"fine-tuned for {epochs} epoch{'s' if epochs != 1 else ''} (prune.finetune_epochs){rate}, the weights removed "
                f"held at zero: {name} {report[f'{name}_before_finetuning']:.4g} before, {report[name]:.4g} after",
            )
        for label, key, sub in (
            ("parameters", "parameters", "total"),
            ("non-zero parameters", "parameters", "nonzero"),
            ("MACs", "macs", None),
        ):
            values = [report[n][key][sub] if sub else report[n][key] for n in ("dense", "exported")]
            lines.append(f"{label:<28}{values[0]:>14,}{values[1]:>14,}{values[1] / values[0]:>8.3f}")
        for device in devices:
            for batch, seconds in report["dense"]["latency_seconds"][device].items():
                small = report["exported"]["latency_seconds"][device][batch]
                lines.append(
                    f"{f'latency {device}, batch {batch} (ms)':<28}{1e3 * seconds:>14.4f}{1e3 * small:>14.4f}{small / seconds:>8.3f}"
                )
        lines += _files_lines(report, self.no_trainable_file)
        if report.get("onnx_file"):
            lines.append(
                f"wrote {report['onnx_file']}: ONNX Runtime runs it as the file above does; its {name}: "
                f"{report[f'onnx_{name}']:.4g}; max |ONNX - {Path(report['file']).name}| on the test inputs: "
                f"{report['onnx_max_abs_difference_to_file']:.2e}"
            )
        return lines


def budget_of(assignments) -> Budget:
    """The :class:`~bayesprune.core.pruning.Budget` of ``--budget key=value`` assignments over the command's defaults
    (``level=unit``; one of sparsity, keep, threshold and macs must be given; ``min_keep`` as in Python);
    ``fraction``, the old name of ``sparsity``, is read as it with a note."""
    fields, given = {"level": "unit"}, set()
    for assignment in assignments:
        keys, value = parse_override(assignment)
        key = ".".join(keys)
        if key in given:
            raise BayesPruneError(f"--budget {key}: given twice; give each budget field once")
        fields[key] = value
        given.add(key)
    fields = read_renamed(fields, "budget", Budget.renamed)
    unknown = sorted(set(fields) - set(Budget.__dataclass_fields__))
    if unknown:
        raise BayesPruneError(
            f"--budget {unknown[0]}: not a budget field (one of {sorted(Budget.__dataclass_fields__)})"
        )
    if not {"sparsity", "keep", "threshold", "macs"} & set(fields):
        raise BayesPruneError("--budget needs one of sparsity, keep, threshold and macs (e.g. --budget sparsity=0.5)")
    return Budget(**fields)


def check_export_arguments(out, *, repeats: int = 30, force: bool = False, formats=FORMATS[:1]) -> tuple:
    """``(file, trainable file, ONNX file or None)`` of ``out``, refused in one line when ``out`` names a
    folder, a file there exists (without ``force``) or its folder does not, ``repeats`` is not a count up to
    :data:`MAX_REPEATS`, or ``formats`` (of :data:`FORMATS`) asks for ONNX without its packages installed."""
    from bayesprune.core.onnx_file import missing_onnx_packages

    out_path = Path(out)
    if not out_path.name or out_path.is_dir() or str(out).endswith("/"):
        raise BayesPruneError(f"--out {str(out)!r}: name a file to write, not a folder")
    unknown = [kind for kind in formats if kind not in FORMATS]
    if unknown:
        raise BayesPruneError(f"--format {unknown[0]!r}: not a format (one of {', '.join(FORMATS)})")
    missing = missing_onnx_packages() if "onnx" in formats else []
    if missing:
        raise BayesPruneError(f"--format onnx: needs the packages {', '.join(missing)}: pip install 'bayesprune[onnx]'")
    if out_path.suffix == ".onnx":  # --out net.onnx names the ONNX file: the .pt2 goes beside it
        if "onnx" not in formats:
            raise BayesPruneError(f"--out {out_path}: an .onnx name needs --format onnx (or name the .pt2 file)")
        out_path = out_path.with_suffix(".pt2")
    trainable = out_path.with_name(f"{out_path.stem}.trainable.pt")
    onnx = out_path.with_name(f"{out_path.stem}.onnx") if "onnx" in formats else None
    for path in (out_path, trainable, onnx):
        if path is not None and (path.is_dir() or (path.exists() and not path.is_file())):
            raise BayesPruneError(
                f"--out {out_path}: {path} is a folder or not a regular file; --force never replaces it"
            )
        if path is not None and path.exists() and not force:
            raise BayesPruneError(f"--out {out_path}: {path.name} exists; pass --force to overwrite it")
    if not out_path.parent.is_dir():
        raise BayesPruneError(f"--out {out_path}: the folder {out_path.parent} does not exist")
    if not 1 <= repeats <= MAX_REPEATS:
        raise BayesPruneError(f"--repeats must be a positive integer up to {MAX_REPEATS}, got {repeats}")
    return out_path, trainable, onnx


def export_run(
    run_dir,
    *,
    out,
    budget=None,
    repeats: int = 30,
    force: bool = False,
    formats=FORMATS[:1],
    finetune_epochs: int | None = None,
) -> Exported:
    """Export the network of the saved run in ``run_dir`` (``bayesprune export RUN_DIR --out OUT``).

    Args:
        run_dir: a run directory of a single fit (``bayesprune run --out``).
        out: the file to write (``torch.export`` format, ``.pt2``); ``OUT_STEM.trainable.pt`` is written beside it.
        budget: a :class:`~bayesprune.core.pruning.Budget` pruning further than the method did (``prune``'s
            scores of the fit), or ``None``: the method's own network (for a method with inclusion
            probabilities, the median probability model: weights of probability >= 1/2).
        repeats: timed forward passes per batch size and device.
        force: overwrite existing files at ``out``.
        formats: of :data:`FORMATS`; with ``"onnx"``, ``OUT_STEM.onnx`` is written beside ``out`` too,
            run by ONNX Runtime on the test split (its metric and its largest difference to ``out``'s outputs
            are reported).
        finetune_epochs: epochs of fine-tuning in place of the run's ``prune.finetune_epochs`` (``None``: the run's).

    The run's ``prune.finetune_epochs`` fine-tunes the exported network (:mod:`bayesprune.pipeline.finetune`)
    before it is written; ``finetune_epochs`` (``--finetune-epochs``) replaces it, so a run fitted without
    fine-tuning is fine-tuned at export, as its curve's points would have been, without fitting it again.

    Raises :class:`~bayesprune.core.errors.BayesPruneError` (one line, nothing written) on a bad argument
    or run directory.
    """
    from bayesprune.models import new_net
    from bayesprune.pipeline.rundir import load_run

    check_export_arguments(out, repeats=repeats, force=force, formats=formats)
    if finetune_epochs is not None and not is_count(finetune_epochs, 0):
        raise BayesPruneError(
            f"--finetune-epochs must be a non-negative integer up to {MAX_COUNT}, got {finetune_epochs!r}"
        )
    config, dataset, fitted = load_run(run_dir)
    # the network the user brought, as the config builds it: units may have left it while training
    brought = new_net(config, dataset.input_shape, dataset.output_dim, seed=config.seed, weights=False)
    return export_fitted(
        fitted,
        dataset,
        brought=brought,
        out=out,
        budget=budget,
        repeats=repeats,
        force=force,
        run_metrics=_first_fit_metrics(Path(run_dir)),
        formats=formats,
        finetuning=FineTuning.of(config, dataset.num_train, epochs=finetune_epochs),
    )


def export_fitted(
    fitted,
    dataset,
    *,
    out,
    budget=None,
    repeats: int = 30,
    force: bool = False,
    run_metrics=None,
    formats=FORMATS[:1],
    finetuning=None,
    brought=None,
) -> Exported:
    """Export ``fitted`` (a :class:`~bayesprune.methods.Fitted`), measured on ``dataset``'s test split, as
    :func:`export_run` does; ``run_metrics`` (a ``metrics.json``'s record) gives the run's own test metric;
    ``finetuning`` (a :class:`~bayesprune.pipeline.finetune.FineTuning`, or ``None``) trains the exported
    network further on ``dataset``'s training split, its zero weights held at zero. ``brought`` is the
    network the user brought (the model factory's, before any unit left while training; any weights),
    measured as ``"dense"`` and against which the units removed are counted; ``None``: the fit's network."""
    from bayesprune.core.normalization import changes, has_running_stats
    from bayesprune.core.tasks import network_test_metric
    from bayesprune.methods import get_method

    out, trainable, onnx = check_export_arguments(out, repeats=repeats, force=force, formats=formats)
    levels = get_method(fitted.method).prune_levels
    if budget is not None and budget.level not in levels:
        raise BayesPruneError(
            f"--budget level={budget.level}: method {fitted.method!r} prunes at level {' or '.join(levels)} only"
        )
    shape = tuple(dataset.input_shape)
    dense = fitted.network().eval()
    brought = dense if brought is None else brought.to(next(dense.parameters()).device).eval()
    exported, weight_masks, dead, budget = _pruned(fitted, dense, budget, shape)
    # a masked network with batch norms is written with statistics of its own (prune.recalibrate)
    recalibrated = fitted.calibration is not None and changes(dense, weight_masks) and has_running_stats(exported)
    if recalibrated:
        fitted.calibration.apply(exported)
    x = dataset.x_test[:256]
    with torch.no_grad():
        masked = fitted.masked_network(weight_masks).eval()(x)
        difference = (exported(x) - masked).abs().max().item()
    before = choice = None
    if finetuning is not None:  # the smaller network trained further, the weights removed held at zero
        before = network_test_metric(exported, dataset)
        zeros = {name: p != 0 for name, p in exported.named_parameters() if name in fitted.sites and not p.all()}
        exported, choice = finetuning.apply(exported, dataset, zeros, calibration=fitted.calibration, teacher=dense)
    written = _written(fitted, dataset, exported, brought, weight_masks, (out, trainable, onnx), repeats)
    name, preprocessing = written["metric"], written["preprocessing"]
    run_value = (run_metrics or {}).get(name)
    report = {
        "budget": None if budget is None else {key: value for key, value in vars(budget).items() if value is not None},
        name: written["error"],
        f"run_{name}": run_value if isinstance(run_value, (int, float)) else None,
        f"method_{name}": written["own"],
        "input_shape": list(shape if preprocessing.pixels is None else preprocessing.pixels.stored),
        "inputs": dataset.export_inputs or "as the data files hold them",
        **({} if preprocessing.pixels is None else {"pixels": preprocessing.pixels.state()}),
        "recalibrated_statistics": recalibrated,
        "standardises_inputs": preprocessing.input_mean is not None,
        "scales_outputs": preprocessing.scales_targets,
        "max_abs_difference_to_masked": difference,
        "removed_dead_units": {site: int((~m).sum()) for site, m in dead.items()},
        "removed_units": written["removed"],
        "file": str(out),
        "trainable_file": None if written["why_not"] else str(trainable),
        "trainable_needs_network": None if written["why_not"] else written["needs_network"],
        "finetune_epochs": 0 if finetuning is None else finetuning.epochs,
        f"{name}_before_finetuning": before,
        **({} if choice is None else {"finetune_choice": choice}),
        **written["onnx"],
        **written["measured"],
    }
    return Exported(report, compared_inputs=len(x), no_trainable_file=written["why_not"])


def _pruned(fitted, dense, budget, shape) -> tuple:
    """``(exported, weight_masks, dead, budget)``: what the method learned (its network as it is, already
    sparse or shrunk, or for a method with inclusion probabilities the weights of probability >= 1/2, the
    median probability model), pruned further at ``budget`` (a MAC budget resolved to a fraction, returned),
    and without the units left dead (``dead``: site → mask of the units kept)."""
    from bayesprune.core.export import dead_units, export
    from bayesprune.core.macs import resolve_macs
    from bayesprune.core.pruning import expand_unit_masks, prune

    probabilities = fitted.inclusion_probabilities()
    weight_masks = {site: p >= 0.5 for site, p in probabilities.items()} if probabilities is not None else {}
    try:
        net = export(dense, weight_masks)
        if budget is not None and budget.macs is not None:  # the fitted network's MACs cut to that fraction
            budget, _ = resolve_macs(fitted.scores(), budget, dense, input_shape=shape)
        if budget is not None:
            masks = prune(fitted.scores(), budget, net=dense, input_shape=shape)
            if budget.level == "unit":
                net = export(net, masks, input_shape=shape)
                masks = expand_unit_masks(dense, masks, input_shape=shape)
            else:
                net = export(net, masks)
            for name, mask in masks.items():
                weight_masks[name] = weight_masks[name].to(mask.device) & mask if name in weight_masks else mask
        dead = dead_units(net, input_shape=shape)
        exported = export(net, dead, input_shape=shape).eval() if dead else net.eval()
    except ValueError as error:
        raise BayesPruneError(f"export: {error}") from None
    return exported, weight_masks, dead, budget


def _written(fitted, dataset, exported, brought, weight_masks, paths, repeats) -> dict:
    """Write ``exported`` to ``paths`` (``out``, the trainable file, the ONNX file or ``None``), all of them or
    none (each written beside its place, measured, then moved there), and what was measured of them: the test
    metric of the file as written (``metric``, ``error``), the method's own with the same weights removed
    (``own``), the trainable file's refusal (``why_not``) or ``needs_network``, the ONNX file's metric and
    difference (``onnx``), size, MACs and latency (``measured``), the units removed (``removed``) and the
    data's ``preprocessing``, which the files hold (they take the rows of the user's files and give targets
    in their units)."""
    from bayesprune.core.export import save_portable, save_trainable
    from bayesprune.core.onnx_file import run_onnx, save_onnx
    from bayesprune.core.predict import metric
    from bayesprune.core.preprocessing import preprocessing_of, with_preprocessing
    from bayesprune.core.tasks import is_classification, metric_name, predictive_mean
    from bayesprune.pipeline.evaluation import batched_predictions

    out, trainable, onnx = paths
    shape = tuple(dataset.input_shape)
    preprocessing = preprocessing_of(dataset)
    example = next(_raw_batches(dataset, preprocessing, batch_size=2))
    raw_y = dataset.y_test if is_classification(dataset.task) else preprocessing.raw_targets(dataset.y_test)
    # new files, never a link planted there
    partials = _fresh_beside(out), _fresh_beside(trainable), *([_fresh_beside(onnx)] if onnx else [])
    written = {"metric": metric_name(dataset.task), "preprocessing": preprocessing, "needs_network": None, "onnx": {}}
    try:
        save_portable(with_preprocessing(exported, preprocessing), partials[0], example)
        if onnx:
            save_onnx(with_preprocessing(exported, preprocessing), partials[2], example)
        try:
            # a network with a forward of its own: its shapes, for a network its code builds (load_trainable's net=)
            written["needs_network"] = save_trainable(
                exported, partials[1], input_shape=shape, preprocessing=preprocessing, built=brought
            )
            written["why_not"] = None
        except ValueError as error:
            written["why_not"] = str(error)
        loaded = torch.export.load(str(partials[0])).module()  # the file as written
        with torch.no_grad():
            outputs = torch.cat([loaded(batch) for batch in _raw_batches(dataset, preprocessing)])
        written["error"] = metric(dataset.task, predictive_mean(outputs, dataset.task), raw_y)
        if onnx:  # the ONNX file as ONNX Runtime runs it, beside the .pt2's outputs
            onnx_outputs = run_onnx(partials[2], _raw_batches(dataset, preprocessing))
            name = written["metric"]
            written["onnx"] = {
                "onnx_file": str(onnx),
                f"onnx_{name}": metric(dataset.task, predictive_mean(onnx_outputs, dataset.task), raw_y),
                "onnx_max_abs_difference_to_file": (onnx_outputs - outputs).abs().max().item(),
            }
        # the method's own prediction with the same weights removed (the run's figure is of its whole network)
        own = batched_predictions(fitted, dataset.x_test, masks=weight_masks)[0] if weight_masks else None
        written["own"] = (
            None if own is None else metric(dataset.task, own, dataset.y_test, target_std=dataset.target_std)
        )
        written["measured"] = _measure({"dense": brought, "exported": exported}, shape, repeats)
        written["removed"] = removed_units(brought, exported, shape)
        check_stop("while exporting; no file written")  # SIGINT or SIGTERM: the files all written or none
        os.replace(partials[0], out)
        if onnx:
            os.replace(partials[2], onnx)
        if written["why_not"] is None:
            os.replace(partials[1], trainable)
    finally:
        for partial in partials:
            partial.unlink(missing_ok=True)
    return written


def removed_units(brought, exported, shape) -> dict:
    """``{"heads": [removed, of], "units": [removed, of]}``: the attention heads, and the channels and hidden
    units, of ``brought``'s unit groups (:func:`~bayesprune.core.structure.unit_groups`) that ``exported`` lacks,
    group by group (a group is named after its first layer in both); ``{}`` for a network Torch-Pruning cannot
    trace (no units: it loses weights only)."""
    from bayesprune.core.structure import NotTraceable, unit_groups

    try:
        before, after = (
            {group.name: group for group in unit_groups(network, shape)} for network in (brought, exported)
        )
    except (NotTraceable, ValueError):
        return {}
    counts = {"heads": [0, 0], "units": [0, 0]}
    for name, group in before.items():
        kind = counts["heads" if group.heads_of is not None else "units"]
        kind[0] += group.units - (after[name].units if name in after else group.units)
        kind[1] += group.units
    return counts


def _files_lines(report: dict, no_trainable_file) -> list:
    """The lines of the ``.pt2`` file and of the trainable file (or why there is none): the inputs they take
    and what the ``.pt2`` file does to them (the loader's :class:`~bayesprune.core.preprocessing.Pixels`, the
    standardisation) and to the outputs."""
    done = [_pixels_text(report["pixels"]) + " as the loader does"] if "pixels" in report else []
    done += (["standardises them with the training split's mean and std"] if report["standardises_inputs"] else []) + (
        ["gives the target in its own units"] if report["scales_outputs"] else []
    )
    lines = [
        f"wrote {report['file']}: torch.export.load(path).module() runs it with torch alone (inputs of shape (batch, "
        f"{', '.join(map(str, report['input_shape']))}) {report['inputs']}"
        + ("" if "pixels" not in report else f", pixel values 0-{report['pixels']['white']:g}")
        + (f"; it {' and '.join(done)}" if done else "")
        + ")"
    ]
    if no_trainable_file is not None:
        return [*lines, f"no trainable file: {no_trainable_file}"]
    inputs = "the loader's images" if "pixels" in report else "the standardised data"
    return [
        *lines,
        f"wrote {report['trainable_file']}: bayesprune.core.export.load_trainable(path"
        + (", net=the network as your code builds it" if report["trainable_needs_network"] else "")
        + ") rebuilds it as a trainable nn.Module"
        + ("" if not done else f" of {inputs} (load_trainable(path, raw_inputs=True) wraps it as the file above)"),
    ]


def _pixels_text(pixels: dict) -> str:
    """``"divides them by 16, resizes them bilinearly to 32x32 and repeats the grey channel 3 times"`` of a
    :meth:`~bayesprune.core.preprocessing.Pixels.state`."""
    stored, shape = pixels["stored"], pixels["shape"]
    steps = [f"divides them by {pixels['white']:g}"]
    if stored[1:] != shape[1:]:
        steps.append(f"resizes them bilinearly to {'x'.join(map(str, shape[1:]))}")
    if stored[0] != shape[0]:
        steps.append(f"repeats the grey channel {shape[0]} times")
    return ", ".join(steps[:-1]) + (" and " if len(steps) > 1 else "") + steps[-1]


def _removed_text(removed: dict) -> str:
    """``"2 of 8 attention heads, 50 of 228 channels and hidden units"`` of :func:`removed_units`' counts."""
    parts = [
        f"{gone:,} of {total:,} {'attention heads' if kind == 'heads' else 'channels and hidden units'}"
        for kind, (gone, total) in removed.items()
        if total
    ]
    return ", ".join(parts) or "no units (a network without unit groups loses weights only)"


def _measure(networks: dict, shape: tuple, repeats: int) -> dict:
    """Name → parameters, MACs and latency on the CPU (and CUDA where there is one) of each of ``networks``."""
    from bayesprune.core.export import count_macs, count_parameters, measure_latency

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    return {
        key: {
            "parameters": count_parameters(network),
            "macs": count_macs(network, shape),
            "latency_seconds": {
                device: measure_latency(network, shape, device=device, repeats=repeats) for device in devices
            },
        }
        for key, network in networks.items()
    }


def _fresh_beside(path: Path) -> Path:
    """A new empty hidden file beside ``path`` (same suffix), created exclusively: written, then renamed
    onto ``path``, it replaces a link there instead of writing through it."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".partial{path.suffix}", dir=path.parent)
    os.close(handle)
    return Path(name)


def _first_fit_metrics(run_dir: Path) -> dict:
    """The run's ``metrics.json`` of its first split and seed (as ``load_run`` restores it), or ``{}``."""
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    for key in ("per_seed", "per_split"):
        if metrics.get(key):
            metrics = metrics[key][0]
    return metrics if isinstance(metrics, dict) else {}


def _raw_batches(dataset, preprocessing, batch_size: int = 1024):
    """``dataset``'s test inputs as the user's files hold them (float32), ``batch_size`` rows at a time: the
    images its loader kept (``raw_x_test``), or its inputs' standardisation undone, of a tensor split or of
    rows read on demand (:class:`~bayesprune.data.streaming.Rows`), never held as one tensor."""
    if dataset.raw_x_test is not None:
        return (batch.float() for batch in chunks(dataset.raw_x_test, batch_size))
    return (preprocessing.raw_inputs(batch) for batch in chunks(dataset.x_test, batch_size))
