"""What happens around a fit: the config, a run (runner) and its directory (rundir), the checks before
it, evaluation, the report, the plain baseline, the services on a saved run (export, certify,
importance, report), and comparisons and sweeps with their engines. It reaches methods only through
their registry."""
