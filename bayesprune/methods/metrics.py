"""What a method's own keys of ``metrics.json`` may hold (:attr:`~bayesprune.methods.Method.metrics_keys` and
:attr:`~bayesprune.methods.Method.metrics_rules`), checked before ``bayesprune report`` writes anything from
them: a tampered value is one line naming the key, never a plot of an empty table, a zip cut short or a
string shown where a list was written."""

from bayesprune.core.validation import Constraint, Rule, count, is_number, list_of, optional, unit

#: A finite number.
NUMBER = Constraint(is_number, "be a finite number", refused=(float("nan"), "1", True))
#: A number of at least 0 (a time, an error, a histogram's count).
NONNEGATIVE = Constraint(lambda v: is_number(v) and v >= 0, "be a non-negative number", refused=(-1, "1", True))
#: A fraction, both ends included.
FRACTION = unit(open_low=False, open_high=False)
#: A count of units, weights or epochs (0 included).
COUNT = count(0)
#: A count of units per layer of a network.
ARCHITECTURE = list_of(COUNT, "unit counts", distinct=False, convert=None)


def numbers(item: Constraint = NUMBER, what: str = "finite numbers", *, nonempty: bool = True) -> Constraint:
    """A list of values ``item`` accepts, repeats allowed."""
    return list_of(item, what, nonempty=nonempty, distinct=False, convert=None)


#: A list of finite numbers, some of them unset (``None``: a point not evaluated, a value that diverged).
SOME_NUMBERS = numbers(optional(NUMBER), "finite numbers or nulls")


def table_of(item: Constraint, what: str) -> Constraint:
    """A non-empty JSON object of names to values ``item`` accepts."""
    return Constraint(
        lambda v: isinstance(v, dict) and bool(v) and all(isinstance(k, str) and item.accepts(x) for k, x in v.items()),
        f"be a non-empty table of {what}",
        refused=({}, [], "text"),
    )


def same_length(key: str, of: str) -> Rule:
    """``key``, a list, holds one value per entry of ``of`` (a grid's points, a network's layers, the epochs)."""
    return Rule(
        key,
        lambda m: key not in m or of not in m or len(m[key]) == len(m[of]),
        lambda m: f"hold one value per entry of {of!r} ({len(m[of])})",
    )


def check_metrics_keys(method, metrics: dict):
    """Raise ``ValueError`` naming the first key of ``metrics`` that ``method`` (a :class:`Method` class)
    declares and whose value breaks its declaration, then the first of its rules that fails; a declared key
    that is absent is left to the method's report (runs of earlier versions wrote fewer)."""
    for key, constraint in method.metrics_keys.items():
        if key in metrics and not constraint.accepts(metrics[key]):
            raise ValueError(f"{key!r} must {constraint.expectation}, got {_shown(metrics[key])}")
    for rule in method.metrics_rules:
        if not rule.holds(metrics):
            value = metrics.get(rule.key) if rule.value is None else rule.value(metrics)
            raise ValueError(f"{rule.key!r} must {rule.expectation(metrics)}, got {_shown(value)}")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
