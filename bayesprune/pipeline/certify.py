"""``bayesprune certify`` as a library call: the PAC-Bayes certificate of a saved run, recomputed from
its training data by the method that fitted it (PBP's, paper 002)."""

from bayesprune.core.errors import BayesPruneError
from bayesprune.core.validation import is_count

#: Networks ``certify`` draws at most: 100 times the largest packaged ``pbp.mc_samples``, each a pass over the bound's rows.
MAX_CERTIFY_SAMPLES = 100_000


def certify(run_dir, *, samples: int | None = None) -> dict:
    """The certificate of the saved run in ``run_dir`` (``bayesprune certify RUN_DIR``), a dict of its
    terms and bound, from ``samples`` networks drawn from the posterior (default: the run's own count).

    Raises :class:`~bayesprune.core.errors.BayesPruneError` (one line) on a bad count, a bad run directory
    or a method without a certificate.
    """
    from bayesprune.methods import Method, available_methods, get_method
    from bayesprune.pipeline.rundir import load_run

    if samples is not None and not (is_count(samples) and samples <= MAX_CERTIFY_SAMPLES):
        raise BayesPruneError(f"--samples must be a positive integer up to {MAX_CERTIFY_SAMPLES:,}, got {samples}")
    config, dataset, fitted = load_run(run_dir)
    result = get_method(config.method).certificate(fitted, dataset, config.method_options, samples=samples)
    if result is None:
        having = [name for name, method in available_methods().items() if method.certificate is not Method.certificate]
        raise BayesPruneError(
            f"{run_dir}: method {config.method!r} has no certificate (these have: {', '.join(having)})"
        )
    return result
