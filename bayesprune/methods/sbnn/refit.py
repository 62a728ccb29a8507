"""A fit that did not learn, fitted again from another start (``sbnn.refit``, issue 49).

From PyTorch's ``Linear`` start the weights of a user's MLP of two hidden layers lie inside the spike and some
fits stay there, predicting the trivial predictor (:mod:`~bayesprune.methods.sbnn.learned`); the fan-in start
(``sbnn.init = "fan-in"``) learns on those, but as every fit's start it moved the fits that had learned
(docs/reproductions.md, The default selection with users' networks). So only a fit the check flags is fitted
again, from ``sbnn.refit``'s start, in a stage of its own (:data:`REFIT_STAGE`) after its first: its seed,
minibatch order and draws are those of the first, and a fit that learned is left exactly as it is.
"""

from dataclasses import replace

from bayesprune.methods.sbnn.learned import learning_check, warn_not_learned

#: The stage of a refit (and the start of its stages' names when the fit has several starts): after the first
#: fit's ``"svi"`` stage, so that a checkpoint taken during the refit resumes into it.
REFIT_STAGE = "svi refit"


def refits(options) -> bool:
    """Whether a fit of ``options`` that did not learn is fitted again: ``sbnn.refit`` names a start other
    than the fit's own."""
    return options.refit not in ("none", options.init)


def refit_options(options):
    """``options`` with ``init`` the refit's start."""
    return replace(options, init=options.refit)


def refit_record(record: dict, options) -> dict:
    """What ``metrics.json`` says of a refit (``refitted``): the first fit's
    :func:`~bayesprune.methods.sbnn.learned.learning_check` record and the start it was fitted again from."""
    return {**record, "start": options.refit}


def refitted_text(record: dict) -> str:
    """The report's section on a refit."""
    return (
        f"## The fit was refitted from the {record['start']} start\n\nIts first fit (from the network's start) did "
        f"not learn: its error on the training rows, {record['training_error']:.4g}, was no better than "
        f"{record['trivial_training_error']:.4g}, that of a predictor that reads no input. It was fitted again from "
        f"the {record['start']} start (`sbnn.refit`; the same seed, minibatches and draws), and that fit is the one "
        "reported."
    )


def check_and_refit(fit_once, net, data, options, ctx):
    """``fit_once(net, data, options, ctx, stage)`` (a fit of ``options`` in ``stage``), checked, and fitted
    again from :func:`refit_options` in :data:`REFIT_STAGE` where it did not learn and :func:`refits`. Sets the
    kept fit's ``refitted`` (:func:`refit_record` or ``None``) and ``not_learned`` (with its warning)."""
    fitted = fit_once(net, data, options, ctx, "svi")
    record, refitted = learning_check(fitted, data, ctx.seed), None
    if record is not None and refits(options):
        refitted = refit_record(record, options)
        fitted = fit_once(net, data, refit_options(options), ctx, REFIT_STAGE)
        record = learning_check(fitted, data, ctx.seed)
    fitted.refitted = refitted
    fitted.not_learned = warn_not_learned(record, data.task, refitted=refitted)
    return fitted


def check_and_refit_stack(fit_stack, nets: list, datasets: list, options, contexts: list) -> list | None:
    """:func:`check_and_refit` of the fits of a stack: ``fit_stack(nets, datasets, options, contexts, stage)``
    trains them together (``None``: it cannot); the members that did not learn are fitted again as one stack
    of their own, each as its separate refit, and the others are left as the stack left them."""
    fits = fit_stack(nets, datasets, options, contexts, "svi")
    if fits is None:
        return None
    records = [learning_check(fitted, data, ctx.seed) for fitted, data, ctx in zip(fits, datasets, contexts)]
    flagged = [k for k, record in enumerate(records) if record is not None] if refits(options) else []
    refitted = [None] * len(fits)
    if flagged:  # stackable as the first stack was: the start does not decide it
        again = fit_stack(
            *([items[k] for k in flagged] for items in (nets, datasets)),
            refit_options(options),
            [contexts[k] for k in flagged],
            REFIT_STAGE,
        )
        for k, fitted in zip(flagged, again):
            refitted[k], fits[k] = refit_record(records[k], options), fitted
            records[k] = learning_check(fitted, datasets[k], contexts[k].seed)
    for fitted, record, first, data in zip(fits, records, refitted, datasets):
        fitted.refitted = first
        fitted.not_learned = warn_not_learned(record, data.task, refitted=first)
    return fits
