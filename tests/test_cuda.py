"""Every method on a CUDA device (skipped without one; ``pytest -m cuda`` selects these): a short
digits run fits on the GPU, and what it wrote serves a machine without one. Its checkpoint holds CPU
tensors only, the run is read back and exported on the CPU, and the exported network reproduces the
fitted network's masked outputs there; stopped at its first checkpoint, it resumes on the GPU and
ends where the uninterrupted run ends."""

import json

import pytest
import torch

from bayesprune.cli import main
from bayesprune.core.errors import Interrupted
from bayesprune.core.loop import STOP
from bayesprune.methods import available_methods, context
from bayesprune.pipeline.runner import resume_run, run

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_fits_on_cuda_and_exports_on_cpu(method, short_config, tmp_path, capsys):
    out = tmp_path / "run"
    metrics = run(short_config(method, "device='cuda'", "baseline.enabled=false"), out)
    assert metrics["device"].startswith("cuda")
    saved = torch.load(out / "checkpoint.pt", weights_only=True)  # no map_location: devices as written
    tensors = []

    def collect(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, (dict, list, tuple)):
            for item in value.values() if isinstance(value, dict) else value:
                collect(item)

    collect(saved)
    assert tensors and {tensor.device.type for tensor in tensors} == {"cpu"}

    capsys.readouterr()
    with torch.device("cpu"):
        assert main(["export", str(out), "--out", str(tmp_path / "net.pt2"), "--repeats", "1", "--json"]) in (0, None)
    report = json.loads(capsys.readouterr().out)
    assert report["max_abs_difference_to_masked"] < 1e-4
    assert 0.0 <= report["test_error"] <= 100.0  # percent


@pytest.mark.parametrize("kernels", ["eager", "compiled"])
def test_the_variational_kernels_on_cuda_equal_those_on_the_cpu(kernels):
    """The sBNN's joint draw and KL (bayesprune.core.fused.drawn_kl) on CUDA, eager or compiled (Triton),
    equals the CPU's at the same draw: the noise is taken from the CUDA draw."""
    from bayesprune.core.distributions import SpikeSlabPosteriors
    from bayesprune.core.fused import kernel_mode, softplus
    from test_kernels import PRIOR, SHAPES

    n = sum(torch.Size(shape).numel() for shape in SHAPES.values())
    results = []
    for device in ("cuda", "cpu"):
        loc = torch.linspace(-1, 1, n, device=device).requires_grad_()
        rho = torch.linspace(-9, 3, n, device=device).requires_grad_()
        prior = (
            PRIOR if device == "cpu" else type(PRIOR)(*(getattr(PRIOR, k).to(device) for k in ("pi", "tau0", "tau1")))
        )
        with kernel_mode(kernels):
            posterior = SpikeSlabPosteriors(loc, softplus(rho), SHAPES, [prior] * len(SHAPES), prior.constants)
            draws = torch.cat([q.rsample().flatten() for q in posterior.sites.values()])
            kls = torch.stack([q.summed_kl(prior) for q in posterior.sites.values()])
        if device == "cuda":
            noise = ((draws - loc) / softplus(rho)).detach().cpu()
        else:
            draws = loc + softplus(rho) * noise  # the CUDA draw's noise
        loss = draws.sum() + kls.sum()
        results.append([x.detach().cpu() for x in (draws, kls, *torch.autograd.grad(loss, (loc, rho)))])
    torch.testing.assert_close(results[0][1:], results[1][1:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_stopped_on_cuda_resumes_on_cuda(method, short_config, tmp_path, monkeypatch):
    """The CPU checkpoint of a CUDA fit is put back on the GPU: the resumed run's metrics equal the
    uninterrupted run's (to 1e-3: CUDA's reductions need not add in the same order twice)."""
    from test_services import Stopper, without_timings

    config = short_config(method, "device='cuda'", "baseline.enabled=false")
    whole = without_timings(run(config, tmp_path / "whole"))
    monkeypatch.setattr(context, "write_checkpoint", Stopper(context.write_checkpoint, stop_after=1))
    out = tmp_path / "stopped"
    try:
        with pytest.raises(Interrupted):
            run(config, out)
    finally:
        STOP.signal = None
    resumed = without_timings(resume_run(out))
    assert resumed["device"].startswith("cuda")
    assert numbers(resumed) == pytest.approx(numbers(whole), rel=1e-3, abs=1e-3)


def numbers(value, prefix=""):
    """Every number in the nested ``value``, keyed by its path."""
    if isinstance(value, dict):
        return {key: item for name, entry in value.items() for key, item in numbers(entry, f"{prefix}/{name}").items()}
    if isinstance(value, list):
        return {
            key: item for index, entry in enumerate(value) for key, item in numbers(entry, f"{prefix}/{index}").items()
        }
    return {prefix: value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_bfloat16_training_on_cuda_ends_near_float32(method, short_config, tmp_path):
    """``train.precision = "bfloat16"`` on a GPU: the short digits run's test error is within a few points of
    the float32 run's (the same seed; bfloat16 rounds every layer's output, so not equal)."""
    errors = {}
    for precision in ("float32", "bfloat16"):
        config = short_config(method, "device='cuda'", "baseline.enabled=false", f"train.precision={precision!r}")
        errors[precision] = run(config, tmp_path / precision)["test_error"]
    assert abs(errors["bfloat16"] - errors["float32"]) < 5.0, errors


@pytest.mark.parametrize("kind", ["magnitude", "torch-pruning"])
def test_a_comparisons_plain_network_cells_train_on_cuda_and_write_cpu_networks(kind, tmp_path):
    """compare's magnitude and Torch-Pruning cells follow ``device``: the plain network trains on the GPU,
    and the networks the cell writes (read by the leaderboard on any machine) hold CPU tensors."""
    from dataclasses import replace

    from bayesprune.pipeline.compare import comparison_cells, execute, load_comparison
    from bayesprune.pipeline.compare.leaderboard import leaderboard_rows
    from helpers import TINY

    raw, options = load_comparison(None, [*TINY, "device='cuda'", "prune.level='unit'", "data.batch_size=512"])
    options = replace(options, sparsities=(0.5,))
    (cell,) = [cell for cell in comparison_cells(raw, options) if cell.kind == kind]
    folder = tmp_path / cell.name
    metrics = execute(cell, str(folder))
    (row,) = leaderboard_rows([cell], [folder], options)
    assert row["test_error"] == metrics["per_sparsity"][0]["test_error"]
    for path in folder.glob("network-*.pt"):
        assert {t.device.type for t in torch.load(path, weights_only=True).values()} == {"cpu"}, path


def test_a_stack_the_device_has_no_memory_for_is_fitted_again_in_halves(tmp_path, monkeypatch, capsys):
    """The CUDA allocator's own out-of-memory error inside a stack's step (a stack of more than one fit asks
    it for twice the device's memory, through ``bayesprune.core.batched.BEFORE_STEP``): the run's two seeds
    are fitted one at a time, said in one line, each seed's metrics those of its run alone (that the failed
    stack is freed before: tests/pipeline/test_batched_seeds.py)."""
    from bayesprune.core import batched
    from bayesprune.pipeline.config import load_config

    total = torch.cuda.get_device_properties(0).total_memory

    def greedy(stack, epoch, index):
        if stack.count > 1:
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")

    settings = ["device='cuda'", "train.epochs=2", "prune.finetune_epochs=1", "prune.sparsities=[0.0, 0.9]"]
    alone = {
        seed: run(load_config("magnitude-digits", [*settings, f"seed={seed}"]), tmp_path / f"{seed}") for seed in (1, 2)
    }
    monkeypatch.setattr(batched, "BEFORE_STEP", [greedy])
    capsys.readouterr()
    run(load_config("magnitude-digits", [*settings, "seeds=[1, 2]"]), tmp_path / "together")
    said = [line for line in capsys.readouterr().err.splitlines() if "device memory" in line]
    assert said == ["bayesprune: 2 fits together ran out of device memory; fitting 1 at a time"]
    for seed in (1, 2):
        together = json.loads((tmp_path / "together" / "seeds" / f"seed-{seed}.json").read_text())
        # to one digit of 360 (0.28 points): the stack's batched products round apart from one fit's on CUDA
        assert together["test_error"] == pytest.approx(alone[seed]["test_error"], abs=0.3)
        assert together["pruning_curve"][-1]["test_error"] == pytest.approx(
            alone[seed]["pruning_curve"][-1]["test_error"], abs=0.3
        )


def graphed_fit(mode: str, *, precision: str = "float32", loss=None) -> tuple:
    """``(history, parameters)`` of 3 epochs of a LeNet-300-100 on 700 random images (5 minibatches of 128 and
    one of 60 an epoch), Adam with a cosine schedule, under ``train.graphs = mode``."""
    import torch.nn.functional as F
    from torch import nn

    from bayesprune.core.graphs import graph_mode
    from bayesprune.core.loop import TensorBatches, optimizer_step, train
    from bayesprune.core.precision import training_precision

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Flatten(), nn.Linear(784, 300), nn.ReLU(), nn.Linear(300, 100), nn.ReLU(), nn.Linear(100, 10)
    ).cuda()
    generator = torch.Generator().manual_seed(1)
    x, y = torch.rand(700, 1, 28, 28, generator=generator), torch.randint(10, (700,), generator=generator)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3)
    objective = loss or F.cross_entropy
    step = optimizer_step(lambda a, b: objective(net(a), b), optimizer)
    with graph_mode(mode), training_precision(precision):
        history = train(step, TensorBatches(x.cuda(), y.cuda(), batch_size=128, seed=2), epochs=3, scheduler=scheduler)
    return history, [param.detach().cpu() for param in net.parameters()]


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_training_steps_replayed_as_cuda_graphs_end_where_eager_steps_end(precision):
    """The whole step (forward, backward, Adam) captured after 3 eager steps, captured again at each epoch's
    new rate (3 captures), the smaller last minibatch of each epoch eager: every step's loss and the
    parameters those of the same fit launched step by step (capturable Adam's rounding apart)."""
    eager, eager_params = graphed_fit("off", precision=precision)
    graphed, graphed_params = graphed_fit("on", precision=precision)
    assert eager.graphs is None
    assert graphed.graphs["captures"] == 3 and graphed.graphs["eager"] == 3 + 3 and graphed.graphs["replayed"] == 12
    assert graphed.graphs["seconds"] > 0
    assert graphed.step_losses == pytest.approx(eager.step_losses, rel=1e-4, abs=1e-5)
    for expected, actual in zip(eager_params, graphed_params):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_a_step_that_cannot_be_captured_runs_eagerly_and_says_why():
    """A loss that reads a value back to the host (``.item()``) cannot be captured: said once, and the fit
    is the eager one."""
    import torch.nn.functional as F

    def reading(output, y):
        loss = F.cross_entropy(output, y)
        return loss * (1.0 if loss.item() > -1 else 0.0)

    eager, eager_params = graphed_fit("off", loss=reading)
    with pytest.warns(RuntimeWarning, match=r"train.graphs: stage 'fit' could not be captured \("):
        graphed, graphed_params = graphed_fit("on", loss=reading)
    assert graphed.graphs["captures"] == 0 and graphed.graphs["eager"] == 18
    assert graphed.step_losses == pytest.approx(eager.step_losses, rel=1e-4, abs=1e-5)


def test_a_run_with_graphs_on_gives_the_metrics_of_one_without_and_says_what_they_cost(tmp_path):
    """``train.graphs = "on"`` through the runner: the same metrics to rounding, and the captures of magnitude
    pruning's plain network (stage 'plain') and of the pruned networks' fine-tuning ('fit') said in one line each."""
    from bayesprune.pipeline.config import load_config

    settings = ["device='cuda'", "train.epochs=3", "prune.finetune_epochs=1", "baseline.enabled=false"]
    off = run(load_config("magnitude-digits", settings), tmp_path / "off")
    with pytest.warns(RuntimeWarning, match=r"train.graphs: stage '\w+': \d+ capture\(s\) in ") as said:
        on = run(load_config("magnitude-digits", [*settings, "train.graphs='on'"]), tmp_path / "on")
    stages = {str(w.message).split("'")[1] for w in said if "capture(s) in" in str(w.message)}
    assert {"plain", "fit"} <= stages, stages
    assert on["test_error"] == pytest.approx(off["test_error"], abs=0.5)  # points: a digit or two of 360
    assert [row["test_error"] for row in on["pruning_curve"]] == pytest.approx(
        [row["test_error"] for row in off["pruning_curve"]], abs=1.0
    )
