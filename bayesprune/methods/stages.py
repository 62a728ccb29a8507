"""A method's stages, declared on its typed options: what its fit trains, in order, and for how long.

A fit is a sequence of stages (:meth:`~bayesprune.methods.FitContext.train`). Its options say which
(:meth:`Staged.fit_stages`): each :class:`Stage` names what it trains and where its epochs come from, the main
stage's from ``train.epochs`` and every other's from one option of the method's table. The pipeline reads
them and never the method's table: ``compare.budget_epochs`` gives each stage its share of the budget
(:func:`held_to_budget`); the context times every stage it trains and counts its epochs
(:meth:`~bayesprune.methods.FitContext.training_cost`). The options change
themselves, typed (:meth:`Staged.one_network`, :meth:`Staged.with_epochs`); nothing edits a method's TOML
table on its behalf.

Options that do not derive from :class:`Staged` (a method of one stage needs nothing) get its defaults: one
main stage, the options as they are.
"""

import math
from dataclasses import dataclass, fields, replace

from bayesprune.core.errors import ConfigError

#: The key of the main stage's epochs among the stages' epochs, and that of the run's fine-tuning.
MAIN, FINETUNE = "train.epochs", "prune.finetune_epochs"


@dataclass(frozen=True)
class Stage:
    """One stage of a fit.

    Attributes:
        name: the name the fit trains it under (``ctx.train(name, ...)``), or the start of the names of a
            stage the fit runs once per item (``"masks"`` for ``"masks magnitude 0.9"``).
        trains: what it trains, in words (for the reference and the report).
        epochs: its epochs under these options; 0: it does not run.
        option: the option of the method's table that sets ``epochs``; ``None``: the main stage, whose
            epochs are ``train.epochs``; a dotted path (``start_options.pretrain_epochs``): an option of a
            table inside the method's, which a budget leaves as it is.
    """

    name: str
    trains: str
    epochs: int
    option: str | None = None

    @property
    def key(self) -> str:
        """Where its epochs are set: ``train.epochs`` or the option's name."""
        return MAIN if self.option is None else self.option


class Staged:
    """The base of a method's ``Options`` whose fit has several stages, or whose options a comparison
    held to an epoch budget must change: a method overrides what differs from the defaults."""

    def fit_stages(self, epochs: int) -> tuple:
        """The fit's :class:`Stage` s in the order it runs them, ``epochs`` being the main stage's
        (``train.epochs``). The default: the main stage alone."""
        return (Stage("train", "the method's parameters", epochs),)

    def one_network(self):
        """These options with only the training of the network a comparison's row reports (a comparison
        inside the fit, further start masks, grid points never reported: off), so that a comparison held
        to ``compare.budget_epochs`` trains the budget's epochs and no more. The default: unchanged."""
        return self

    def with_epochs(self, epochs: dict, factor: float):
        """These options with each stage option of ``epochs`` (option → epochs) set, and the epochs they
        name inside the main stage (a schedule's milestones) scaled with it, when the main stage becomes
        ``factor`` times as long. The default: the options set, nothing scaled."""
        return replace(self, **epochs)


def _declared(options):
    """The class whose :class:`Staged` methods ``options`` has (:class:`Staged`'s defaults where it has none)."""
    return type(options) if isinstance(options, Staged) else Staged


def stages_of(options, epochs: int) -> tuple:
    """:meth:`Staged.fit_stages` of any method's ``options``."""
    return _declared(options).fit_stages(options, epochs)


def held_to_budget(options, epochs: int, finetune_epochs: int, budget: int, *, owner: str) -> tuple:
    """``compare.budget_epochs``: ``(options, train_epochs, finetune_epochs)`` whose stages, those of the
    network a comparison's row reports (:meth:`Staged.one_network`) and the fine-tuning of each pruned
    network after the fit (``prune.finetune_epochs``), train ``budget`` epochs in all, in the proportions
    ``options``, ``epochs`` (``train.epochs``) and ``finetune_epochs`` give them (:func:`split_epochs`).

    The stages' order in the split (which breaks ties of the largest remainders) is the main stage, the
    options' stages in the order of their fields, then the fine-tuning."""
    options = _declared(options).one_network(options)
    order = {field.name: index for index, field in enumerate(fields(options))}
    own = {stage.option: stage.epochs for stage in stages_of(options, epochs) if stage.option in order}
    own = {f"{owner}.{option}": own[option] for option in sorted(own, key=order.__getitem__)}
    stages = {MAIN: epochs, **own, FINETUNE: finetune_epochs}
    split = split_epochs(budget, stages, owner)
    main, finetune = split.pop(MAIN), split.pop(FINETUNE)
    given = {key.removeprefix(f"{owner}."): value for key, value in split.items() if stages[key] > 0}
    return _declared(options).with_epochs(options, given, main / epochs), main, finetune


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
