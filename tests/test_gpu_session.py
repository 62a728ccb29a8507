"""``benchmarks/gpu_session.sh`` runs on a fresh checkout of a GPU machine: the wheels it carries cover
every requirement of the installed bayesprune that the machine's image lacks, and its steps run, here in
their dry form on the CPU from the wheel the script builds (CI runs the whole dry run: ``.ci/run``, which
sets ``GPU_SESSION_DRY_RUN_DONE`` after it, and the suite's one-step dry run is skipped there)."""

import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_requirements  # noqa: E402


def test_the_wheels_and_the_image_cover_every_requirement_and_each_pin_satisfies_what_requires_it():
    reached = gpu_requirements.carried_closure()
    assert "pyro-ppl" in reached and "platformdirs" in reached  # ArviZ's, two levels down
    uncovered = set(reached) - set(gpu_requirements.WHEELS) - gpu_requirements.IMAGE
    assert not uncovered, f"carry these as wheels or list them in IMAGE: {sorted(uncovered)}"
    assert set(gpu_requirements.WHEELS) <= set(reached), "a wheel nothing requires"
    for name, pin in gpu_requirements.WHEELS.items():
        for requirement in reached[name]:
            assert requirement.specifier.contains(Version(pin)), f"{name}=={pin} against {requirement}"


def test_the_check_names_an_unmet_requirement(monkeypatch):
    real = metadata.version

    def older(name):
        return "0.1" if gpu_requirements.normalized(name) == "pyro-ppl" else real(name)

    assert gpu_requirements.unmet() == []
    monkeypatch.setattr(metadata, "version", older)
    assert any(problem.startswith("pyro-ppl 0.1: pyro-ppl>=") for problem in gpu_requirements.unmet())


@pytest.mark.skipif(
    os.environ.get("GPU_SESSION_DRY_RUN_DONE") == "1", reason="the whole dry run ran before the suite (.ci/run)"
)
def test_the_dry_run_builds_installs_and_runs_a_step_from_the_wheel(tmp_path):
    # building the wheel offline needs setuptools' bdist_wheel (setuptools >= 70.1, or the wheel package)
    if Version(metadata.version("setuptools")) < Version("70.1"):
        pytest.importorskip("wheel")
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("needs bash and timeout")
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "--dry-run", "lenet300_float32"],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON": sys.executable,
            "OUT": str(tmp_path),
            "OMP_NUM_THREADS": "1",
            "STEP_LIMIT_SCALE": "4",  # the limits are for an idle machine; a test may share its cores
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = (tmp_path / "steps.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in steps] == ["wheel", "requirements", "lenet300_float32"]
    assert all(": exit 0 in " in line for line in steps)
    assert (tmp_path / "gpu-session.tar.gz").is_file()


def test_an_unknown_step_is_one_line_and_exit_2():
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "--dry-run", "lenet"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown step lenet " in done.stderr
