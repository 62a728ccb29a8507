"""Priors declared per module: ``[[model.priors]]`` tables, each matching modules of the network to a prior
and its hyper-parameters, so that a user composes, for example, a unit-level prior on the convolution
channels with a spike-and-slab on the classifier::

    [[model.priors]]
    modules = "Conv2d"                # a module or parameter name, a glob over them, or a module type name
    prior = "group-spike-slab"
    pi = 0.3

    [[model.priors]]
    modules = ["classifier", "fc.*"]
    prior = "spike-slab"
    log_tau1 = 0.0

A table reads its patterns as ``model.expose`` does (:func:`bayesprune.core.sites.matching_parameters`):
its prior goes to every site (a parameter that carries a prior) they match; the sites no table claims keep
the method's own prior. A prior name no table registers, a hyper-parameter out of range, a pattern that
matches no site and two tables claiming one site are refused, each in one line naming the key.
"""

import math
from dataclasses import dataclass

from bayesprune.core.errors import ConfigError
from bayesprune.core.sites import matching_parameters, parameter_owners
from bayesprune.core.validation import Rule, interval, option, refuse_unknown_keys, scale, unit, validate
from bayesprune.models.priors import GroupHorseshoePrior, GroupSpikeSlabPrior, Prior, SpikeSlabPrior

#: The keys of a table besides the prior's hyper-parameters.
TABLE_KEYS = ("modules", "prior")


@dataclass(frozen=True)
class SpikeSlabSettings:
    """Hyper-parameters of a ``spike-slab`` or ``group-spike-slab`` table (paper 003, eq. 3.1).

    Attributes:
        pi: prior inclusion probability π of a weight (``spike-slab``) or of a unit (``group-spike-slab``).
        log_tau0, log_tau1: log standard deviations of the spike and of the slab, log τ0 < log τ1; the
            defaults are ``[sbnn]``'s.
    """

    pi: float = option(0.5, unit())
    log_tau0: float = option(-6.0, interval(-80, 80))
    log_tau1: float = option(1.0, interval(-80, 80))

    rules = (
        Rule(
            "log_tau0",
            lambda o: o.log_tau0 < o.log_tau1,
            lambda o: f"be below log_tau1 = {o.log_tau1} (tau0 < tau1)",
            example={"log_tau0": 1.0, "log_tau1": 0.0},
        ),
    )

    def arguments(self) -> dict:
        return {"pi": self.pi, "tau0": math.exp(self.log_tau0), "tau1": math.exp(self.log_tau1)}


@dataclass(frozen=True)
class HorseshoeSettings:
    """Hyper-parameters of a ``group-horseshoe`` table (Louizos et al. 2017, section 3.2).

    Attributes:
        global_scale: τ0 of the site's global scale s ~ C+(0, τ0).
    """

    global_scale: float = option(1.0, scale())

    def arguments(self) -> dict:
        return {"global_scale": self.global_scale}


#: Name → (its hyper-parameters' dataclass, the :class:`~bayesprune.models.priors.Prior` built from them).
MODULE_PRIORS = {
    "spike-slab": (SpikeSlabSettings, SpikeSlabPrior),
    "group-spike-slab": (SpikeSlabSettings, GroupSpikeSlabPrior),
    "group-horseshoe": (HorseshoeSettings, GroupHorseshoePrior),
}


@dataclass(frozen=True)
class PriorTable:
    """One ``[[model.priors]]`` table, read: its patterns, its prior's name and its hyper-parameters."""

    modules: tuple
    prior: str
    settings: object

    def build(self) -> Prior:
        return MODULE_PRIORS[self.prior][1](**self.settings.arguments())


def read_table(index: int, table) -> PriorTable:
    """The table ``model.priors[index]`` read and checked, or :class:`ConfigError` naming its key."""
    key = f"model.priors[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{key} must be a table (modules = ..., prior = ...), got {table!r}")
    modules = table.get("modules")
    modules = (modules,) if isinstance(modules, str) else modules
    if not isinstance(modules, (list, tuple)) or not modules or not all(isinstance(m, str) and m for m in modules):
        raise ConfigError(f"{key}.modules must be a module name, glob or type name, or a list of them, got {modules!r}")
    if table.get("prior") not in MODULE_PRIORS:
        raise ConfigError(f"{key}.prior must be one of {sorted(MODULE_PRIORS)}, got {table.get('prior')!r}")
    settings_class = MODULE_PRIORS[table["prior"]][0]
    values = {name: value for name, value in table.items() if name not in TABLE_KEYS}
    refuse_unknown_keys(key, values, settings_class)
    settings = settings_class(**values)
    validate(settings, key)
    return PriorTable(tuple(modules), table["prior"], settings)


def read_tables(tables) -> tuple:
    """Every ``[[model.priors]]`` table read (:func:`read_table`)."""
    return tuple(read_table(index, table) for index, table in enumerate(tables))


def assign_tables(net, tables, sites) -> dict:
    """Site name → the index of the table (of ``tables``, read) that claims it, for the ``sites`` of ``net``;
    a pattern matching no site, or a site two tables claim, raises :class:`ConfigError` naming the key."""
    owners, sites = parameter_owners(net), set(sites)
    claimed = {}
    for index, table in enumerate(tables):
        for pattern in table.modules:
            found = matching_parameters(owners, pattern) & sites
            if not found:
                raise ConfigError(
                    f"model.priors[{index}].modules: {pattern!r} matches no site of the network "
                    "(the parameters that carry a prior; model.expose adds to them)"
                )
            for name in sorted(found):
                if claimed.setdefault(name, index) != index:
                    raise ConfigError(
                        f"model.priors[{index}].modules: {pattern!r} claims {name!r}, which "
                        f"model.priors[{claimed[name]}] claims already"
                    )
    return claimed


class ModulePriors(Prior):
    """The prior of each site from the table that claims it (:func:`assign_tables`), else ``default``.

    Args:
        default: the method's own prior policy, for the sites no table claims.
        tables: the ``[[model.priors]]`` tables, read (:func:`read_tables`).
        assignment: site name → table index (:func:`assign_tables`).
    """

    def __init__(self, default: Prior, tables, assignment: dict):
        self.default, self.tables, self.assignment = default, tuple(tables), dict(assignment)
        self._priors = [table.build() for table in self.tables]

    def distribution(self, name, param):
        index = self.assignment.get(name)
        return (self.default if index is None else self._priors[index]).distribution(name, param)

    def describe(self, name: str) -> str:
        index = self.assignment.get(name)
        if index is None:
            return f"{self.default.describe(name)}, the method's own"
        return f"{self._priors[index].describe(name)}, model.priors[{index}]"


def module_priors(net, default: Prior, tables, sites) -> Prior:
    """``default``, or with ``tables`` (``[[model.priors]]`` as given) the :class:`ModulePriors` over the
    ``sites`` of ``net``."""
    if not tables:
        return default
    read = read_tables(tables)
    return ModulePriors(default, read, assign_tables(net, read, sites))
