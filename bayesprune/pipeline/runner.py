"""A run: config → data → net → ``METHODS[config.method].fit`` → Fitted → pruning curve → run directory.

Nothing here knows a particular method: it reads the :class:`~bayesprune.methods.Fitted` a method
hands over (scores, predictions, metrics, state, posterior draws).

Everything a user can get wrong (config, data, output directory) is checked before anything is
written. The run is written to a hidden staging directory beside ``out`` and moved into place when
complete, so ``out`` is never left half-written; after a divergence only the last good checkpoint
and the config are moved there.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from bayesprune.analysis.diagnostics import write_posterior
from bayesprune.analysis.tables import write_csv
from bayesprune.core import distributed
from bayesprune.core.checkpoint import (
    CHECKPOINT_DIGEST,
    read_checkpoint,
    save_checkpoint,
    shapes,
    state_digest,
)
from bayesprune.core.errors import Interrupted, StopNow, TrainingDiverged
from bayesprune.core.export import count_macs
from bayesprune.core.files import arrays_digest, read_npz, replacing
from bayesprune.core.graphs import graph_mode
from bayesprune.core.layout import resolve_memory_format
from bayesprune.core.loop import check_stop, set_rng_state
from bayesprune.core.normalization import has_running_stats
from bayesprune.core.preprocessing import preprocessing_of
from bayesprune.core.tasks import is_classification
from bayesprune.methods import get_method
from bayesprune.pipeline.baseline import least_squares_test_rmse, train_plain
from bayesprune.pipeline.checks import check_before_fit, run_chains
from bayesprune.pipeline.config import load_config, new_names
from bayesprune.pipeline.evaluation import macs_curve, metric_name, pruning_curve
from bayesprune.pipeline.finetune import FineTuning
from bayesprune.pipeline.fits import (
    fit_chains_together,
    fit_seeds_together,
    fit_splits_together,
    held_out,
    start_fit,
)
from bayesprune.pipeline.processes import check_same_fits, join, own_directory
from bayesprune.pipeline.report import SCORES_DIGEST, write_report
from bayesprune.pipeline.rundir import (
    CHECKPOINT,
    FIRST_FIT_FILES,
    POSTERIOR,
    SEEDS,
    check_output_dir,
    finished_seed,
    load_run,
    move_into_place,
    resumable,
    staged,
)
from bayesprune.pipeline.summary import summarise_seeds, summarise_splits, with_reference, write_metrics


def run(config, out, *, force: bool = False, progress: bool = False, inputs=(), resumed_from=None, fitted=None) -> dict:
    """Execute ``config`` and write its run directory ``out``; returns the metrics.

    ``inputs`` are further paths ``out`` must not hold (the config file); the data root is one already.
    ``resumed_from`` is the directory of an interrupted run of ``config`` to continue (:func:`resume_run`).
    ``fitted`` is the fit of a run of one seed trained already with other runs'
    (:func:`~bayesprune.pipeline.fits.fit_runs_together`).
    """
    out = Path(out)
    files = [config.data.options.get(key) for key in ("root", "path", "train", "test")]  # the data's own files
    files.append(config.model.weights)
    check_output_dir(out, force=force, inputs=[*inputs, *(path for path in files if isinstance(path, str))])
    join(config, out, force=force, resumed_from=resumed_from)
    if config.experiment.name is not None:
        return _run_experiment(config, out, progress=progress, force=force)
    method = get_method(config.method)
    datasets = check_before_fit(config, resuming=resumed_from is not None)
    check_stop("while loading the data")  # before anything is written
    device = config.torch_device
    progress = progress and distributed.rank() == 0

    with (
        graph_mode(config.train.graphs),  # every training loop of the run: the method's, the baseline's, fine-tuning's
        own_directory(out, resumed_from) as (out, resumed_from),
        staged(out, resumed_from=resumed_from, force=force) as staging,
    ):
        (staging / "config.toml").write_text(config.to_toml())
        seeds = config.seeds or [config.seed]
        try:
            if fitted is not None:
                together = {config.seed: fitted}
            elif resumed_from is None:
                together = fit_seeds_together(config, method, datasets, device, seeds, progress=progress)
            else:
                together = {}
        except (TrainingDiverged, Interrupted, StopNow) as error:
            raise _stopped(error, staging, out, CHECKPOINT) from None
        runs = [
            _seed_run(
                replace(config, seed=seed),
                method,
                datasets,
                device,
                staging,
                out,
                first=number == 0,
                several=len(seeds) > 1,
                progress=progress,
                resumed_from=resumed_from,
                together=together.get(seed),
            )
            for number, seed in enumerate(seeds)
        ]
        check_same_fits([final[0] for _, final in runs if final is not None], method.name)
        per_seed = [metrics for metrics, _ in runs]
        before = set(staging.iterdir())
        try:  # a signal while writing the run's files stops it as in training: the checkpoint kept, resumable
            metrics = with_reference(config, summarise_seeds(per_seed, config.seeds) if len(runs) > 1 else per_seed[0])
            metrics[SCORES_DIGEST] = arrays_digest(read_npz(staging / "scores.npz"))
            metrics[CHECKPOINT_DIGEST] = _final_state_digest(staging, [final for _, final in runs if final is not None])
            write_metrics(staging / "metrics.json", metrics)
            write_csv(staging / "pruning_curve.csv", metrics["pruning_curve"], digits=6)
            write_report(staging)
            check_stop("while writing the report")
        except (Interrupted, StopNow) as error:
            for path in set(staging.iterdir()) - before:  # nothing of a report without its run
                path.unlink()
            raise _stopped(error, staging, out, CHECKPOINT) from None
        for _, final in runs:  # the training-loop checkpoint is replaced last, once nothing stops the run
            if final is not None:
                _write_final_checkpoint(staging, *final)
        move_into_place(staging, out, force=force)
    return metrics


def run_file(name, out, *, overrides=(), data_root=None, force: bool = False, progress: bool = False) -> tuple:
    """``bayesprune run NAME --out OUT``: :func:`run` of the packaged config or TOML file ``name`` (``None``:
    the embedded default) with ``overrides`` (``"key=value"``) and the data in ``data_root``; returns
    ``(config, metrics)``."""
    overrides = list(overrides)
    if data_root is not None:  # stored resolved, so the run directory's config.toml works from any directory
        overrides.append(f"data.root={json.dumps(str(Path(data_root).resolve()))}")
    config = load_config(name, overrides)
    # A run's own config.toml may rerun it in place (it is read before anything is replaced).
    own = (Path(out) / "config.toml").resolve()
    config_file = [name] if name and Path(name).is_file() and Path(name).resolve() != own else []
    return config, run(config, out, force=force, progress=progress, inputs=config_file)


def _seed_run(
    config,
    method,
    datasets,
    device,
    staging: Path,
    out: Path,
    *,
    first: bool,
    several: bool,
    progress: bool,
    resumed_from=None,
    together=None,
) -> tuple:
    """The metrics of one seed of the run (``config.seed``), and the fit whose final checkpoint is
    still to write (:func:`_fit_splits`, ``together`` its first fit if trained already), or ``None``.

    Its first fit checkpoints into ``staging`` (``checkpoint.pt`` for the run's first seed, which keeps
    its fit there; ``checkpoint-seed-<seed>.pt`` for later seeds, removed once they finish). In a run
    of several seeds, a finished seed's metrics are kept in ``seeds/seed-<seed>.json``; resuming from
    ``resumed_from`` takes a finished seed from there (and the first seed's files) instead of fitting
    it again, and continues an unfinished one from its checkpoint.
    """
    record = Path(SEEDS) / f"seed-{config.seed}.json"
    checkpoint = CHECKPOINT if first else f"checkpoint-seed-{config.seed}.pt"
    if resumed_from is not None and (resumed_from / record).is_file():
        (staging / SEEDS).mkdir(exist_ok=True)
        for name in [str(record), *(FIRST_FIT_FILES if first else ())]:
            if (resumed_from / name).is_file():
                shutil.copyfile(resumed_from / name, staging / name)
        return finished_seed(resumed_from / record, config.seed), None
    resume = None
    if resumed_from is not None and (resumed_from / checkpoint).is_file():
        saved = read_checkpoint(resumed_from / checkpoint)
        resume = saved if "loop" in saved and saved["method"] == config.method else None
    metrics, final = _fit_splits(
        config,
        method,
        datasets,
        device,
        staging,
        out,
        first=first,
        progress=progress,
        checkpoint=staging / checkpoint,
        resume=resume,
        together=together,
    )
    if several:
        if final is not None:  # a finished seed is taken as it is on --resume: its checkpoint first
            _write_final_checkpoint(staging, *final)
            final = None
        (staging / SEEDS).mkdir(exist_ok=True)
        write_metrics(staging / record, metrics)
        if not first:
            (staging / checkpoint).unlink(missing_ok=True)
    return metrics, final


def _fit_splits(
    config,
    method,
    datasets,
    device,
    staging: Path,
    out: Path,
    *,
    first: bool,
    progress: bool,
    checkpoint: Path,
    resume=None,
    together=None,
) -> tuple:
    """Fit and evaluate every split from ``config.seed``; the first fit checkpoints to ``checkpoint``
    (continuing from ``resume``, a checkpoint of that fit, when given) unless it was trained with the
    run's other seeds (``together``, :func:`fit_seeds_together`); the splits after the first train together
    (:func:`fit_splits_together`), as do the first split's chains after the first; the run's first writes its
    fit into ``staging``. Returns the metrics and, for the run's first fit, ``(fitted, built, preprocessing)`` for
    :func:`_write_final_checkpoint` (else ``None``): its training-loop checkpoint stays in ``staging``
    until then, so that a run stopped while writing its files resumes from it."""
    per_split, final = [], None
    chains = run_chains(config, datasets[0])
    # A signal while fitting, evaluating (the plain baseline, a certificate) or writing the fit's files keeps its checkpoint.
    by_split = {}  # the splits after the first, trained together once the first is fitted and evaluated
    try:
        for index, dataset in enumerate(datasets):
            if index == 1:
                by_split = fit_splits_together(config, method, datasets, device, progress)
            fits = []
            dataset, validation = held_out(config, dataset, config.seed + index)
            split_config = config.for_data(dataset.num_train)
            stacked = {}  # the chains after the first, trained together once the first is fitted and evaluated
            for chain in range(chains if index == 0 else 1):
                if chain == 1 and chains > 2:
                    stacked = fit_chains_together(config, method, dataset, validation, chains, device, progress)
                trained = stacked.get(chain) if chain else (by_split.get(index) if index else together)
                if trained is not None:  # trained with others
                    net, baseline_net, start, ctx, fitted = trained
                    set_rng_state(ctx.rng_after)
                else:
                    net, baseline_net, start, ctx = start_fit(
                        config,
                        dataset,
                        validation,
                        seed=config.seed + index + chain,
                        device=device,
                        progress=progress,
                        first_chain=chain == 0,
                        draws=first and index == chain == 0,
                        checkpoint=checkpoint if index == chain == 0 else None,
                        resume=resume if index == chain == 0 else None,
                    )
                    fitted = method.fit(net, dataset, config.method_options, ctx)
                if chain == 0:
                    built = shapes(baseline_net)
                    per_split.append(
                        {
                            f"start_{metric_name(dataset.task)}": start,
                            **_evaluate(
                                split_config, dataset, fitted, device, baseline_net, validation, ctx.best_epoch
                            ),
                            **ctx.training_cost(),
                            **_finetune_cost(split_config, dataset),
                        }
                    )
                fits.append(fitted)
            if first and index == 0:
                _write_fit(staging, fits[0])
                idata = method.inference_data(fits, dataset, seed=config.seed)
                check_stop("while drawing the posterior")
                if idata is not None:
                    write_posterior(idata, staging / POSTERIOR, method=config.method)
                check_stop("while writing the posterior")
                final = (fits[0], built, preprocessing_of(dataset), dataset.feature_names)
    except (TrainingDiverged, Interrupted, StopNow) as error:
        raise _stopped(error, staging, out, checkpoint.name) from None
    return {**summarise_splits(per_split), "chains": chains}, final


def resume_run(out, *, progress: bool = False) -> dict:
    """Continue the interrupted run of ``out`` from its last completed epoch, and write the complete
    run there.

    The checkpoint is the newest of ``out``'s own (left by SIGINT, SIGTERM or a divergence) and those
    of staging directories a killed run (SIGKILL, power loss) left beside it; a staging directory
    resumed from is removed once the run is complete. The minibatch order, random draws and
    optimiser state continue where they stopped, so on the same device the metrics equal an
    uninterrupted run's (training time aside). Seeds a run of several seeds had finished are taken as
    they are; other splits and chains of the seed in progress are fitted again from their seeds.
    """
    out = Path(out)
    source, config = resumable(out)
    metrics = run(config, out, force=True, progress=progress, resumed_from=source)
    if source != out and distributed.rank() == 0:
        shutil.rmtree(source)
    return metrics


def _run_experiment(config, out: Path, *, progress: bool, force: bool = False) -> dict:
    from bayesprune.pipeline.experiments import get_experiment  # finds the studies by name

    experiment = get_experiment(config)
    experiment.check(config)
    with staged(out, force=force) as staging:
        (staging / "config.toml").write_text(config.to_toml())
        metrics = experiment.run(config, staging, device=config.torch_device, progress=progress)
        write_metrics(staging / "metrics.json", metrics)
        move_into_place(staging, out, force=force)
    return metrics


def _evaluate(config, dataset, fitted, device, baseline_net, validation=None, best_epoch=None) -> dict:
    name = metric_name(dataset.task)
    n_weights = fitted.n_weights
    finetuned = _finetuned(config, dataset, fitted)  # one per fit: each distinct network fine-tuned once
    curve = pruning_curve(
        fitted,
        dataset,
        sparsities=sorted({0.0, *config.prune.sparsities}),
        device=device,
        budget=config.prune.budget,
        include_biases=config.prune.include_biases,
        finetuned=finetuned,
        predictive=config.prune.predictive_at(n_weights),
        unpruned_draws=fitted.unpruned_draws,
    )
    macs = {}
    if config.prune.macs:  # of the network the fit started from
        dense = count_macs(baseline_net, dataset.input_shape)
        macs = {
            "macs_dense": dense,
            "macs_curve": macs_curve(
                fitted,
                dataset,
                targets=config.prune.macs,
                dense_macs=dense,
                device=device,
                min_keep=config.prune.min_keep,
                finetuned=finetuned,
            ),
        }
    metrics = {
        "method": config.method,
        "dataset": dataset.name,
        "task": dataset.task,
        "device": str(device),
        "architecture": config.model.name,
        "n_weights": n_weights,
        "epochs": len(fitted.history.epoch_losses),
        **({} if validation is None else {"n_validation": len(validation[1])}),
        **({} if best_epoch is None else {"best_epoch": best_epoch}),
        "seed": config.seed,
        "score": fitted.score_name,
        # for a network with batch norms: whether the curve's masked networks had statistics of their own
        **({"recalibrated_statistics": fitted.calibration is not None} if has_running_stats(fitted.net) else {}),
        **{key: value for key, value in curve[0].items() if key.startswith(name)},
        **fitted.metrics(),
        "pruning_curve": curve,
        **macs,
        **({"finetune_choices": finetuned.choices} if finetuned is not None and finetuned.choices else {}),
    }
    if config.baseline.enabled:  # a diverged plain network is reported, not allowed to sink the run
        try:
            plain = train_plain(
                baseline_net.to(device),
                dataset,
                epochs=config.baseline.epochs or config.train.epochs,
                lr=config.baseline.lr or config.optim.lr,
                batch_size=config.data.batch_size,
                seed=config.seed,
                validation=validation,
                patience=config.train.patience,
                hold=config.baseline.held_out,
                memory_format=resolve_memory_format(config.train.memory_format, dataset.input_shape, device),
            )
            metrics[f"baseline_{name}"] = plain.pop("test")
            metrics.update({f"baseline_{key}": value for key, value in plain.items()})  # its epoch and validation curve
        except TrainingDiverged as error:
            metrics[f"baseline_{name}"], metrics["baseline_diverged"] = None, str(error)
        if not is_classification(dataset.task):
            metrics[f"baseline_linear_{name}"] = least_squares_test_rmse(dataset)
    return metrics


def extend_curve(folder, sparsities) -> dict:
    """The finished run in ``folder`` evaluated at further ``sparsities`` from its saved fit
    (:func:`load_run`), never fitted again, by the run's own :func:`~bayesprune.pipeline.evaluation.pruning_curve`
    (fine-tuned as ``prune.finetune_epochs`` says): its ``pruning_curve``, ``pruning_curve.csv`` and
    ``prune.sparsities`` take the new rows; ``metrics.json`` is written last. Returns the metrics."""
    import tomllib

    import tomli_w

    from bayesprune.core.files import write_text

    folder = Path(folder)
    metrics = json.loads((folder / "metrics.json").read_text())
    config, dataset, fitted = load_run(folder)
    rows = pruning_curve(
        fitted,
        dataset,
        sparsities=list(sparsities),
        budget=config.prune.budget,
        include_biases=config.prune.include_biases,
        finetuned=_finetuned(config, dataset, fitted),
        predictive=config.prune.predictive_at(fitted.n_weights),
    )
    metrics["pruning_curve"] = sorted([*metrics["pruning_curve"], *rows], key=lambda row: row["droprate"])
    raw = new_names(tomllib.loads((folder / "config.toml").read_text()))  # a run written before: prune.droprates
    raw["prune"]["sparsities"] = [row["droprate"] for row in metrics["pruning_curve"]]
    write_text(folder / "config.toml", tomli_w.dumps(raw))
    write_csv(folder / "pruning_curve.csv", metrics["pruning_curve"], digits=6)
    write_text(folder / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def _finetune_cost(config, dataset) -> dict:
    """``finetune_steps``: the optimiser steps of one pruned network's fine-tuning (``prune.finetune_epochs``
    epochs over every training row), which a comparison's row adds to the fit's; nothing without one."""
    finetuning = FineTuning.of(config, dataset.num_train)
    return {} if finetuning is None else {"finetune_steps": finetuning.steps(dataset.num_train)}


def _finetuned(config, dataset, fitted):
    """``masks -> metric`` of the point network fine-tuned as ``prune.finetune_epochs`` asks, or ``None``."""
    finetuning = FineTuning.of(config, dataset.num_train)
    if finetuning is None:
        return None
    return finetuning.test_metrics(fitted, dataset)


def _stopped(error, staging: Path, out: Path, checkpoint: str):
    """The error of a fit that diverged or was interrupted, after keeping what can be kept: its last
    checkpoint (named ``checkpoint``) and the seeds already finished move to ``out`` unless ``out``
    holds a complete earlier run, which is never replaced."""
    if (out / "metrics.json").exists():
        where = f"{out} keeps the earlier complete run"
    elif (staging / checkpoint).exists():
        metadata = read_checkpoint(staging / checkpoint)["metadata"]
        stage = f"stage {metadata['stage']!r}, " if metadata.get("stage") else ""
        move_into_place(staging, out, force=True)  # an interrupted run's files only: the complete run is kept above
        where = f"the checkpoint of {stage}epoch {metadata.get('epoch')} is in {out / checkpoint}"
        if isinstance(error, (Interrupted, StopNow)) and (
            "loop" in read_checkpoint(out / checkpoint) or (out / SEEDS).is_dir()
        ):
            where += f"; continue with: bayesprune run --resume {out}"
    elif (staging / SEEDS).is_dir():
        move_into_place(staging, out, force=True)
        where = f"the finished seeds are in {out / SEEDS}"
        if isinstance(error, (Interrupted, StopNow)):
            where += f"; continue with: bayesprune run --resume {out}"
    else:
        where = "no checkpoint was written"
    message = f"{error}; {where}"
    return (
        Interrupted(message, error.signal) if isinstance(error, (Interrupted, StopNow)) else TrainingDiverged(message)
    )


def _write_fit(folder: Path, fitted):
    """``history.csv`` (training loss per epoch) and ``scores.npz`` (the score of every site)."""
    losses = fitted.history.epoch_losses
    write_csv(
        folder / "history.csv", [{"epoch": epoch + 1, "loss": f"{loss:.8g}"} for epoch, loss in enumerate(losses)]
    )
    with replacing(folder / "scores.npz") as temporary:
        np.savez(temporary, **{name: score.cpu().numpy() for name, score in fitted.scores().items()})


def _final_state_digest(staging: Path, finals: list) -> str:
    """:func:`state_digest` of the checkpoint the run ends with: the last fit still to write, or the one
    already written in ``staging`` (a run of several seeds writes each as it finishes)."""
    state = finals[-1][0].state_dict() if finals else read_checkpoint(staging / CHECKPOINT)["state"]
    return state_digest(state)


def _write_final_checkpoint(folder: Path, fitted, built: dict, preprocessing, feature_names=None):
    """The fit's final checkpoint (early stopping may have put an earlier epoch back), in place of its
    training-loop checkpoint: its network's structure, ``built`` (the shapes the config built), the
    data's ``preprocessing`` and a table's ``feature_names``, which :func:`load_run` checks the reloaded
    data against."""
    features = {} if feature_names is None else {"feature_names": list(feature_names)}
    save_checkpoint(
        folder / CHECKPOINT,
        fitted,
        metadata={"epoch": len(fitted.history.epoch_losses), **features},
        built=built,
        preprocessing=preprocessing,
    )
