"""What happens around a fit: the config, a run and its directory, evaluation, the report, the plain
baseline, and comparisons and sweeps with their engines. It reaches methods only through their registry."""
