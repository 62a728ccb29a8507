"""The default thread count on a busy machine: the default run while another process spins on one core.

What is measured: the wall-clock time of ``bayesprune run --out DIR --quiet`` (the default config;
``--epochs`` shortens its training through ``--set train.epochs=E``) as a subprocess, under
torch's thread counts ``all`` (``--threads`` = every core), ``cores-1`` and ``1``, and without
``--threads`` (``default``: :func:`bayesprune.pipeline.threads.default_threads`), while a Python process
spins on one core the whole time. The variants run in interleaved rounds (the order rotating); the
medians are reported with ``default_over_one_thread``, the target being at most 1.3.
``OMP_NUM_THREADS`` is removed from the runs' environment.

Usage: ``python benchmarks/threads.py [--json] [--rounds 2] [--epochs E]``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bayesprune.pipeline.threads import available_cores


def variants(cores: int) -> dict:
    """Name → the ``--threads`` arguments of each timed run."""
    return {
        "default": [],
        "all": ["--threads", str(cores)],
        "cores-1": ["--threads", str(max(1, cores - 1))],
        "one": ["--threads", "1"],
    }


def timed_run(arguments: list, epochs, folder: Path) -> float:
    command = [sys.executable, "-m", "bayesprune", "run", "--out", str(folder), "--quiet", *arguments]
    if epochs is not None:
        command += ["--set", f"train.epochs={epochs}"]
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (one run of each variant per round)")
    parser.add_argument("--epochs", type=int, help="train.epochs of every run (default: the default config's)")
    args = parser.parse_args(argv)
    cores = available_cores()
    runs = variants(cores)
    samples = {name: [] for name in runs}
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory() as folder:
            names = list(runs)
            for index in range(args.rounds):
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    samples[name].append(timed_run(runs[name], args.epochs, Path(folder) / f"{name}-{index}"))
    finally:
        spinner.kill()
        spinner.wait()
    seconds = {name: statistics.median(values) for name, values in samples.items()}
    result = {
        "cores": cores,
        "rounds": args.rounds,
        "epochs": args.epochs,
        "seconds": seconds,
        "samples": samples,
        "default_over_one_thread": seconds["default"] / seconds["one"],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"default run, {cores} cores, one of them spun by another process, median of {args.rounds} rounds:")
    for name, value in seconds.items():
        print(f"  {name}: {value:.1f} s")
    print(f"default / one thread: {result['default_over_one_thread']:.2f}")


if __name__ == "__main__":
    main()
