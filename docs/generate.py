"""Write ``docs/reference.md``, the config reference, and the README's method table and quick-start
commands from the code: ``python docs/generate.py``.

Every option table is built from a dataclass: each registered method's ``Options`` (the description
of a field is its entry in the class docstring's ``Attributes:`` section) and the core sections
(``DataConfig`` … ``ReferenceConfig`` of :mod:`bayesprune.pipeline.sections`, ``OptimConfig`` of
:mod:`bayesprune.core.optim`), whose field descriptions live in :data:`CORE` below because their
docstrings are prose. A field without a description stops the generator with the list of them, so
that someone writes one. ``tests/test_docs.py`` regenerates both and fails when the committed text
differs: neither can drift from the code. The "allowed" column and the combinations refused below a
table are read from the constraints declared beside each field (:mod:`bayesprune.core.validation`),
the ones the config loader checks.
"""

import dataclasses
import inspect
import math
import re
import sys
from pathlib import Path

OUTPUT = Path(__file__).with_name("reference.md")
README = Path(__file__).parents[1] / "README.md"
HINT = "regenerate it with: python docs/generate.py"

#: Descriptions of the top-level keys (``RunConfig``'s own fields).
TOP = {
    "method": "the registered method (`bayesprune list` shows the packaged configs of every method); its options live in the table of its name (`[sbnn]`)",
    "description": "free text, shown by `bayesprune list`",
    "seed": "the seed of the run (splits, initialisation, minibatch order)",
    "seeds": "`[0, 1, 2]` repeats the whole run from each seed: `metrics.json` holds the mean of every number, `<key>_std` its standard deviation, lists of numbers elementwise, and `per_seed`",
    "device": '`"auto"` (CUDA when present), `"cpu"` or `"cuda[:N]"`',
    "chains": 'independent fits from seeds `seed`, `seed + 1`, … written to `posterior.nc` (R-hat and ESS compare restarts; feature importance pools them); metrics and checkpoint are the first chain\'s. `"auto"`: 4 for the sBNN on your own table (`csv`, `npz` of 1-D inputs), else 1',
}

#: Descriptions of the fields of the core sections, ``section.field`` → text.
CORE = {
    "data.dataset": "`digits`, `mnist`, `fashion-mnist`, `cifar10` (needs `root`), `uci` (needs `root`, `name`, `split`), your own data: `npz`, `csv`, `image-folder` (see [the loaders](#your-own-data)); the simulators `linear-regression`, `feature-importance-2var`, `feature-importance-many`, `feature-selection`",
    "data.batch_size": 'minibatch size, or `"auto"`: a hundredth of the training rows, at least 32',
    "data.splits": 'UCI only: fit every listed split, or `"all"`, and report mean and standard error',
    "model.architecture": '`mlp`, `lenet-300-100`, `lenet-5-caffe` (20-50-800-500; `lenet-5` is its earlier name), `lenet-5-classic` (6-16-120-84, paper 004), `torchvision` (a network of `torchvision.models` with random weights: option `builder`, a builder such as `"resnet18"` or a class such as `"VisionTransformer"`, the other options its arguments); options `hidden` (widths of `mlp`, default `[100]`) and `activation` (`relu`, `tanh`, `sigmoid`, `leaky-relu`)',
    "model.factory": '`"module:callable"`: your own network, built as `callable(input_shape, output_dim, **options)` with the run\'s working directory importable; recorded in `config.toml` so `load_run` rebuilds it. Not beside `architecture`',
    "model.weights": "a file of your trained network's weights (`torch.save(net.state_dict(), path)` of the network `architecture` or `factory` builds) that every fit starts from instead of the builder's initialisation; read weights-only (a pickled object is refused), a file of another network is refused naming the first key that differs; relative to the config file",
    "model.pretrain_epochs": "epochs of plain dense training (maximum likelihood, the run's optimiser and minibatches) before the method's fit, from the built or loaded network; `start_<metric>` in `metrics.json` is the test metric of the network the fit starts from",
    "model.pretrain_schedule": "the rate schedule of that dense training (`constant`, `exponential` or `cosine`: a start trained to a plateau); unset, `optim.schedule`. The fits keep `[optim]`'s own",
    "model.noise_scale": "fixed noise standard deviation of the Gaussian likelihood (regression); unset, it is learned",
    "model.expose": 'parameters added to the sites (parameter or module names, globs such as `"*.bn1.*"`, or module type names such as `"BatchNorm2d"`); by default the sites are the parameters of the Linear and convolution layers',
    "model.hide": "parameters taken out of the sites (same forms); they stay point estimates that the optimiser trains",
    "model.heads": "the number of attention heads of modules that do not hold it as `num_heads` or `num_attention_heads` (module names, globs or type names to counts, e.g. `{\"blocks.*.attn\" = 4}`), so that their heads are units at unit level; timm's, `transformers`' and PyTorch's attention blocks need none",
    "model.priors": '`[[model.priors]]` tables giving modules a prior of their own, read by `sbnn` (other methods refuse the key): `modules` (a parameter or module name, a glob over them, a module type name such as `"Conv2d"`, or a list of them), `prior` (`"spike-slab"`: an inclusion indicator per weight, paper 003 eq. 3.1; `"group-spike-slab"`: one per unit, a Linear layer\'s output unit or a convolution\'s output channel; both with `pi`, `log_tau0`, `log_tau1`, absent 0.5, -6, 1; `"group-horseshoe"`: Louizos et al. 2017\'s group horseshoe, a half-Cauchy scale per unit and one per layer, C+(0, `global_scale`), default 1). Sites no table claims keep the method\'s prior; a pattern matching no site, or a site two tables claim, is refused; the report lists every site\'s prior',
    "optim.name": "`adam` or `sgd`",
    "optim.lr": "learning rate",
    "optim.schedule": "`constant`, `exponential` (× `gamma` per epoch) or `cosine` (annealed to zero over the run)",
    "optim.gamma": "the factor of the exponential schedule",
    "optim.momentum": "SGD's momentum",
    "optim.weight_decay": "weight decay of the plain optimiser steps (pft, pbp's stage 1, probmask, saliency), not of SVI objectives",
    "train.epochs": "passes over the training set (200 when neither it nor `steps` is given)",
    "train.steps": "a budget of gradient steps instead: the epochs that reach it on each data set (replaces `train.epochs`)",
    "train.validation": "fraction of the training split held out; the epoch whose point estimate scores best on it is kept and recorded as `best_epoch` (the test split is read only after the fit; the plain baseline follows the same rule). The stage it acts on: the variational fit (sbnn, sparse-vd), the dense training (pft, pbp's stage 1, saliency); refused for unit-gates and probmask (see [keys each method refuses](#keys-each-method-refuses))",
    "train.patience": "with `train.validation`: stop after this many epochs without improvement",
    "train.checkpoint_every": "epochs between checkpoints (SIGINT or SIGTERM stops a run at the end of the step in progress, keeps the last checkpoint in `--out` and exits 130 or 143)",
    "train.memory_format": "the layout of training minibatches of images (C, H, W): `'channels_last'` (faster convolutions on a GPU, above all under bfloat16), `'contiguous'` (channels first, as stored) or `'auto'`, channels-last on a CUDA device; the methods', the plain baseline's and fine-tuning's minibatches, the same numbers to float rounding; evaluation reads the data as stored; `'channels_last'` is refused for inputs that are not images",
    "train.precision": "`'bfloat16'` runs the forward passes of training under bfloat16 autocast (matrix products and convolutions), the likelihood, the KL and PAC-Bayes terms, the gradients and the optimiser in float32; evaluation and every reported number stay float32; refused on a GPU without bfloat16 arithmetic. Default `'float32'`",
    "train.graphs": "the plain optimiser steps of a method's stages (magnitude pruning's plain network, pft's and unit gates' steps) run as CUDA graphs: after 3 eager steps the whole step (forward, backward, optimiser) is captured once and replayed, captured again when the schedule changes the rate, a minibatch of another size eager; the capture's cost said at the stage's end. `'on'`: refused without a CUDA device; `'auto'`: networks of at most 2,000,000 weights on a CUDA device; SVI steps and stacked fits run eagerly, said once. Default `'off'`",
    "train.kernels": "the per-weight formulas of the variational methods (sbnn, sparse-vd, pbp) run eagerly (`'eager'`), compiled by `torch.compile` into one loop each (`'compiled'`; refused where it cannot build), or compiled for networks of at least 100,000 weights where `torch.compile` works (`'auto'`); refused for methods without such formulas",
    "prune.sparsities": "fractions removed, lowest score first (sBNN: the inclusion logit B − A of eq. 3.8, in float64)",
    "prune.scope": "`global` (ranked across the network) or `layer`",
    "prune.level": "`weight`, or `unit` (hidden units and convolution filters, scored by their gate or by the mean score of their incoming weights)",
    "prune.min_keep": "kept per layer at least; absent, none of the weights and a tenth of each layer's units (at least 1), so that no unit layer is emptied or left one unit",
    "prune.include_biases": "rank and count the biases with the weights (paper 003's prior covers both); `false` keeps every bias and the sparsity is a fraction of the weights. Every curve row reports `sparsity` (all parameters) and `sparsity_weights` (biases left out)",
    "prune.recalibrate": "re-estimate the batch-norm (running-statistics) layers' statistics of every masked network on training batches before it is scored or exported (\"adaptive BN\", `bayesprune.core.normalization`); `false` keeps the dense fit's. Networks without such layers are unaffected",
    "prune.recalibrate_batches": "training batches (of `data.batch_size` rows, at least 128) the statistics are re-estimated on, at most 1000",
    "prune.predictive": 'where the curve evaluates a method\'s Monte-Carlo predictive (`test_error_mc`): `"every"` sparsity, or the `"unpruned"` model only (empty at the other sparsities); `"auto"`: every sparsity for networks of at most 1,000,000 weights, the unpruned model above (a resnet18\'s 20 draws at 7 sparsities cost 8 of its training epochs)',
    "prune.macs": "a MAC budget (with `level = \"unit\"`, `scope = \"global\"`): the fraction of the dense network's multiply-accumulates to keep, or a list of them; at each, units leave by the method's unit scores (the `min_keep` floors kept) until the network costs at most that, counted by `count_macs` on the network without them (`bayesprune.core.macs.resolve_macs`, within one unit's MACs); `metrics.json`'s `macs_curve` holds each point's MACs, units removed and test metric (fine-tuned too with `finetune_epochs`). The dense network is the one the fit starts from, so every method's row is cut to the same MACs. A target below what the floors reach is refused",
    "prune.distill": "knowledge distillation in the fine-tuning (`finetune_epochs`, export's too): the weight in [0, 1] of the divergence of the pruned network's softened predictions from the network's before pruning (Hinton et al. 2015: `T²·KL` at `distill_temperature`; squared difference for regression), the rest on the labels; `0`: none",
    "prune.distill_temperature": "the temperature T that softens both networks' predictions for `distill`",
    "prune.finetune_lr": "the fine-tuning's Adam rate (empty: `optim.lr`), or a list of rates: each pruned network is fine-tuned at every rate on the training rows but `finetune_held_out` of them and the copy with the lowest held-out error is kept (`metrics.json`'s `finetune_choices`; the test split is never read to choose)",
    "prune.finetune_held_out": "the fraction of the training rows held out (drawn with the seed) to choose among `finetune_lr`'s rates",
    "prune.finetune_epochs": "epochs of plain maximum-likelihood training (Adam at `optim.lr`) of each pruned point network, what pruning removed held at zero; each curve row adds `test_error_finetuned` (or `test_rmse_finetuned`), and `bayesprune export` writes the network fine-tuned so (`bayesprune.pipeline.finetune`); `0`: none",
    "baseline.enabled": "train the plain network of the same shape on the same split",
    "baseline.epochs": "its epochs (unset: `train.epochs`)",
    "baseline.lr": "its rate (unset: `optim.lr`)",
    "baseline.validation": "the fraction of the training rows it holds out when the run holds out none (`train.validation = 0`; unset: 0.2): every epoch is scored on them and the best is kept (`baseline_best_epoch`, `baseline_validation_curve` in `metrics.json`); with `train.validation` it uses the run's part, and this key is refused; `0` keeps its last epoch, on every row. Measured (seeds 0-2, 200 epochs unless said): scikit-learn's diabetes as a CSV, MLP 100: RMSE 65.1 (last epoch) → 54.1, the linear model 53.3; digits, MLP 100: 2.96 → 3.15%; digits, a residual CNN with batch norm, 60 epochs: 0.0 → 0.93%: where the last epoch does not overfit, the fifth held out costs up to a point",
    "importance.correlation": "inputs whose absolute correlation on the training rows exceeds it (or that a chain of such pairs joins) form one group of `bayesprune importance`, ranked and selected as one input; in (0, 1], 1 groups none",
    "importance.groups": 'your own groups of inputs by name (`[["mean radius", "mean area"], ...]`), in place of the correlation\'s; every input not named stays alone; an unknown name or an input named twice is refused',
    "importance.selection": "the rule `bayesprune importance` selects groups by: `empirical-null` (log ψ against the other groups', Benjamini-Hochberg; the default, chosen by measurement), `bayesian-fdr` (posterior inclusion) or `knockoff` (model-X knockoffs; needs (copies + 1) × inputs training rows)",
    "reference.source": 'where the published numbers come from (`"paper 003, Table 8, set 2"`)',
    "reference.sparsities": "sparsities of the published numbers",
    "reference.values": "published test metrics printed beside the curve in `report.md`: a list, or a table of lists keyed by `data.name` (the packaged `uci` carries paper 003's Table 2, `mnist-lenet-5-caffe` Table 8, `mnist-lenet-300-100` Table 7)",
}

INTRO = """\
# Config reference

<!-- Generated by docs/generate.py from the Options dataclasses and the core config sections; do not
edit by hand: {hint}. -->

A run is one TOML file (`bayesprune run FILE.toml`, or a packaged name from `bayesprune list`); any
key can be overridden with `--set section.key=value` (`--set sbnn.pi=0.3 --set model.hidden=[50,50]`).
Every invalid value is refused in one line naming the key. The resolved config is saved as
`config.toml` in the run directory. An `[experiment]` table with a `name` turns a run into a
packaged study of many fits (paper 003's simulations, see [reproductions](reproductions.md)); its
other keys are the study's options. Configs and run directories of earlier versions (`[prior]`,
`[guide]`, `[objective]`, `train.predictive_samples`) still load: those keys are read as their
`[sbnn]` names.

Contents: [top level](#top-level), {core_links}, [keys each method refuses](#keys-each-method-refuses),
{method_links}.
"""

USER_DATA = """\
### Your own data

`data.dataset = "npz"`, `"csv"` or `"image-folder"` reads your own files (`bayesprune/data/user.py`):

- `npz`: `data.path`, an archive written by `numpy.savez` with `x_train`, `y_train`, `x_test`, `y_test`
  (optionally `feature_names`, `class_names`). Integer targets are class labels `0..K-1`, floating
  targets regression; inputs keep their shape (`(N, D)` tables, `(N, C, H, W)` images). Read with
  `allow_pickle=False`.
- `csv`: one table `data.path` split by `data.test_fraction` (0.2) with `data.seed`, or two tables
  `data.train` and `data.test`; `data.target` names the target column, every other column is a
  numeric feature; `data.task` (`"classification"` or `"regression"`) or inferred.
- `image-folder`: `data.root` holding `train/<class>/<image>` and `test/<class>/<image>`;
  `data.size` resizes, `data.grayscale` keeps one channel; pixels in `[0, 1]`.

`data.normalize` (`npz`, `csv`) standardises with the training split's statistics (default true for
tables). Every defect is one line naming the file or the option.

### Streaming and augmentation

A training set too large to hold is read a minibatch at a time (`bayesprune/data/streaming.py`):
`x_train` is then `Rows`, which has `len()`, `shape`, `dtype` and `.to(device)` like a tensor and decodes
only the rows it is indexed with. The minibatches are those `TensorBatches` draws for a tensor, in the
same shuffled order from the same checkpointed generator, read through a `DataLoader` whose batch
sampler is that order (decoding in worker processes); a streamed fit gives the numbers of the fit on
the tensor (`tests/data/test_streaming.py`).

- `image-folder` with `data.stream = true` leaves the training images on disk; `data.workers` (0)
  processes decode them. Every file's header is opened at load, so an unreadable file or one of another
  size is refused before training; a file whose pixels are cut short is refused, in one line, when read.
  The test images are still read into memory.
- `npz` with `data.stream = true` memory-maps `x_train` (stored uncompressed, as `numpy.savez` writes
  it; a compressed member is refused): rows are read from the file a minibatch at a time, never
  standardised (`data.normalize = true` is refused beside it, and is the default for tables).
- From Python, `fit_method(name, net, loader, test)` streams a `DataLoader` over a map-style dataset
  by default (its targets are the dataset's `targets` where it has them, else one pass over the
  loader that lets each batch's inputs go; a batch of the wrong shapes or types is one line naming
  `train`, as it is for a `DataLoader` read whole). `stream=False` reads it into memory (faster where
  the rows fit), as a `DataLoader` over an iterable dataset always is; `stream=True` refuses one.
- `train.validation` and the baseline's hold-out keep the training part streamed; the held-out rows
  are read into memory.

The pruning curve scores a test split of `Rows` 4,096 rows at a time
(`pipeline.evaluation.batched_predictions`), each batch predicted from the same state of torch's
generator, so the Monte-Carlo predictive uses the draws the whole tensor gets: the curve equals the
tensor's (tested). Where the data fits on the device, `data.stream = false` (the default) is the
on-device path: the training tensor is moved to the device once and each minibatch augmented there
(tested to give the streamed minibatches).

Every method trains on streamed rows: sBNN's streamed fit is tested to give the losses of the fit on
the tensors, and a one-off check (a `DataLoader` of 64 images, one epoch, a small CNN) gave each of
the other six methods the same losses too.

`data.augment` (`image-folder`, `npz` images; off by default) lists `"crop"` (zero padding of
`data.crop_padding` pixels, default 4, on each side, then a window of the image's size at a uniform
offset) and `"flip"` (left-right mirror with probability 1/2). It applies to the method's training
minibatches only, on their device, drawn from torch's generator (checkpointed); the plain baseline
trains without it. On inputs that are not images `(C, H, W)` it is refused in one line, as is
`data.crop_padding` without `"crop"`.

Not streamed yet: the test split as loaded (every loader and `fit_method` read it into memory: the
plain baseline, the test errors PFT, saliency, ProbMask and unit gates record while fitting,
`compare` and `export` read `x_test` as one tensor), and the places that read the whole training
split at once: sBNN's `keep = "elbo"` over several starts (the ELBO of
every row in one pass; refused in one line beside streamed rows, `sbnn.keep = "validation"` is not),
PBP's prior and bound parts (read into memory), and feature importance (tables only). Normalisation of
images is not among the augmentations.

Peak memory against the number of images (`python benchmarks/streaming.py --sizes 10000 1000000
--methods sbnn unit-gates --one-epoch`; a `DataLoader` of N generated 3x32x32 images, each made from
its index when read, `fit_method(..., epochs=1, stream=True)`, a CNN of two 3x3 convolutions of 8
channels and a linear layer, batches of 256, one thread, one whole epoch: 40 minibatches for 10,000
images, 3,907 for 1,000,000; unit gates without the ten fine-tuning epochs that follow their epoch;
peak RSS of the process, which is 560-568 MB after imports; 746 s and 504 s for the 1,000,000-image
epochs on a machine shared with other jobs):

| method | N = 10,000 | N = 1,000,000 | ratio |
|---|---|---|---|
| sbnn | 810 MB | 870 MB | 1.07 |
| unit-gates | 812 MB | 875 MB | 1.08 |

(Over the first 39 minibatches only, `--steps 39`: 810 → 826 MB and 811 → 830 MB.)

`fit_method` without its `stream` argument (`python benchmarks/streaming.py --sizes 10000 200000
--one-epoch --default --steps 100 [--no-targets]`; the same images, the first 100 minibatches, at most
the whole epoch of 40 for 10,000 images; peak RSS 768 MB before the fit):

| method | dataset | N = 10,000 | N = 200,000 | ratio |
|---|---|---|---|---|
| sbnn | with `targets` | 874 MB | 881 MB | 1.01 |
| unit-gates | with `targets` | 874 MB | 877 MB | 1.00 |
| sbnn | without `targets` | 877 MB | 870 MB | 0.99 |
| unit-gates | without `targets` | 879 MB | 870 MB | 0.99 |

Without `targets`, labels kept as one small tensor per batch fragmented the heap: sbnn peaked at 2,383 MB
for 200,000 images before they were read into one tensor made once.

The 1,000,000 images would be 12.3 GB as one float32 tensor. An image folder of 20,000 PNG files
(32x32 RGB, 10 classes, made in /tmp and deleted after) trains with `bayesprune run --set
"data.dataset='image-folder'" --set data.stream=true --set 'data.augment=["crop","flip"]' --set
train.epochs=1 --threads 1` (the default sBNN MLP, the plain baseline on): peak RSS 1.17 GB against
1.56 GB read into memory (`data.stream = false`), the same test error, and with `data.workers = 1`
on a folder whose classes are colours, test error 10.8% after the epoch (`/usr/bin/time -v`, on a
machine shared with other jobs).
"""

#: Hand-written prose of each method's section: (before the table, after the table).
PROSE = {
    "sbnn": (
        "",
        """\
The packaged `default` config uses π = 0.5, log τ1 = −0.5, log τ0 = −5.5 (paper 003 section 4.3's
family log τ1 = −1 + c, log τ0 = −5 − c for fully connected nets, at c = 0.5), `init_scale = 0.001`
and Adam at 0.005 annealed to zero (`optim.schedule = "cosine"`), chosen on a fifth of the training
rows held out (`default.toml` lists the search). Measured (`bayesprune run default --set seed=S`, 200
epochs, CPU), test error % unpruned / 80% removed / plain network: seed 0 3.6 / 2.8 / 2.8, seed 1
2.5 / 3.6 / 3.3, seed 2 3.6 / 3.9 / 2.8. The previous setting (c = 0, `init_scale = 0.01`, Adam at
0.01 constant) gave 5.6 / 5.3 / 2.8 on seed 0: its KL held the slab weights at σ ≈ τ1 and the
network underfit (3.6% training error). At c ≥ 1 with `init_scale = 0.01`, p*(0, σ) < 1/2 from the
first step, under 7% of the weights reach the spike and 80% removed gives 16-88% validation error.

sBNN weights are ranked by their inclusion logit B − A (eq. 3.8) in float64, not by p*: in float32,
p* rounds to exactly 1 from B − A ≈ 17 on (most weights of a trained net), and a budget would then
remove tied weights in network order. On the old default prior at 80% removed that was 28.3% test
error against 6.9% by logit.
""",
    ),
    "unit-gates": (
        """\
Packaged `unit-gates-lenet300`, `unit-gates-lenet5` with section 7's settings: batch 64, λ = 20,
Adam 1e-3 for 50 epochs, fine-tuning 10 epochs at 1e-4, θ(0) = 0.5, θ_tol = 1e-3, log γ = −25 / −100,
leaky ReLU 1e-3, Glorot-normal weights.
""",
        """\
Any network Torch-Pruning traces: one gate per unit group (`bayesprune.core.structure.unit_groups`:
channels coupled through residual additions, batch norms and depthwise convolutions share a gate;
a transformer's attention heads and MLP hidden units), a closed gate computing the network with the
unit removed. A unit whose θ meets the pruning condition leaves the network, its gates and Adam's
state at that step (`remove_at = "epoch"`: its gate is held at 0 and the network rebuilt once at the
epoch's end). `metrics.json` adds `pruning_ratio` (weights
removed / weights of the starting network; `pruning_ratio_with_input_threshold`),
`learned_architecture`, `units_alive`, `epoch_test_error` and `epoch_seconds` per epoch and
`theta_trajectories`; the report plots them (`units.png`, `theta.png`). Runs need
`prune.level = "unit"` and `train.validation = 0`.
""",
    ),
    "pft": (
        """\
Packaged `pft-lenet300` and `pft-mlp3x1000` with appendix D.3's settings: SGD with momentum 0.9 at
0.01, batches of 128, 30 epochs each of pre-training, mask training (`train.epochs`) and
fine-tuning, clamp mapping, ε = 1e-4, β = 0.5. For every start mask and sparsity s, the one-shot
mask (OSP: the top 1 − s of the criterion's scores, fine-tuned) is compared with PFT
(keep-probabilities λ started from the scores by eq. 6, trained with the weights on the empirical
Gibbs risk through the Concrete relaxation, the top 1 − s of λ kept, ties in λ by |W|, fine-tuned
for the same epochs as OSP). The one-shot criteria are those of `bayesprune.core.criteria`.
""",
        """\
`metrics.json` adds, in the order of `grid` (`[start mask, sparsity]` pairs): `osp_test_error`,
`pft_test_error`, `osp_equal_epochs_test_error` (with `equal_budget_baseline`), `mask_overlap`
(share of the start mask's weights PFT keeps, Fig. 2 left) and `pft_expected_sparsity`; `keep_probability_histogram` (20 bins of λ, Fig. 11),
`perturbation_increase_dense` and `perturbation_increase_pft`. The run's network is the first
pair's; `report.md` adds the OSP/PFT table and `mask_overlap.png`, `perturbation.png`,
`keep_probabilities.png`.
""",
    ),
    "pbp": (
        """\
Packaged `pbp-lenet300` and `pbp-mlp3x1000` with appendix D.2's settings. The training set S is
split at random into S_P (a fraction α) and S \\ S_P (n examples). Stage 1 trains the network on
S_P; stage 2 starts keep-probabilities λ⁰ from a criterion (eq. 6) and trains the prior
P = (1 − λ⁰)δ₀ + λ⁰N(W⁰, σ⁰²) (eq. 5) on S_P by its Gibbs risk; stage 3 starts the posterior Q of the
same family at P and minimises Theorem 1 (eq. 4) by SVI (`bayesprune.methods.pbp.objectives.PACBayesBound`, the
platform's `AnalyticKLELBO` with its `combine` hook) with the bounded cross-entropy (A.3) on
S \\ S_P, the examples the bound's empirical term is measured on. Biases carry Gaussian slabs with
λ = 1, so KL(Q ‖ P) (appendix B.4, a registered KL of `DiracSpikeSlab`) covers every parameter.
""",
        """\
The certificate (`bayesprune.methods.pbp.bounds.certificate`) bounds the 0-1 error of the Gibbs classifier Q:
Q's empirical risk on S \\ S_P is estimated from `mc_samples` networks with its own upper confidence
bound kl⁻¹(R̂ ‖ log(2/δ′)/m), and that bound enters Theorem 1 (`bound`) and Theorem 2
(`bound_kl_inverse`), both at δ′ = δ/(2·`grid_size`): a union over the Monte-Carlo bound and the
theorem of each of the `grid_size` settings searched. With `train.validation` > 0, S is what is left
after the validation rows are held out. `metrics.json` adds `bound`, `bound_kl_inverse`,
`empirical_risk`, `empirical_risk_bound`, `posterior_test_error` (Q's Gibbs test error, %),
`prior_test_error`, `kl`, `n_bound`, `sparsity` (Q's expected sparsity), `alpha`, `delta`,
`grid_size`, `mc_samples`. The point estimate of the pruning curve is μ under the most probable
mask (λ ≥ 1/2), its `_mc` column the Gibbs predictive; scores are logit λ.
`bayesprune certify RUN_DIR [--samples N]` recomputes the certificate of a saved run from its
training data, on the rows of S \\ S_P its checkpoint records (refused if the data there changed).
The bounds are plain functions:

```python
from bayesprune.methods.pbp.bounds import certificate, kl_inverse

cert = certificate(mean_risk=0.02, samples=1000, kl=150.0, n=30_000, delta=0.05)
print(f"Theorem 1: {float(cert.bound):.4f}, Theorem 2: {float(cert.bound_kl_inverse):.4f}")
print(f"kl inverse: {float(kl_inverse(0.02, 0.01)):.4f}")  # sup{p : kl(0.02 || p) <= 0.01}
```
""",
    ),
    "probmask": (
        """\
Packaged `probmask-lenet300`, `probmask-lenet5`: Table 4's optimisers, SGD with momentum 0.9 at 0.1
for the weights and Adam at 6e-3 for s, batches of 256, gradients clipped to norm 3 as in the
authors' code, the 100-epoch schedule t1 = 16, t2 = 60; the paper has no MNIST setting. Every
weight has a keep-probability s started at 1; weights and s train on the expected loss through
`samples` two-Gumbel relaxed masks per step (eqs. 3-5) at τ = 0.97(1 − t/T) + 0.03, and after every
step s is projected exactly onto {s ∈ [0, 1]ⁿ, Σ s ≤ k·n} (Theorem 1, by bisection,
`bayesprune.methods.probmask.projection`), k falling from 1 to 1 − `sparsity` between epochs t1 and
t2 (eq. 7). The final mask is the best of `final_draws` draws m ~ Bernoulli(s) on 10,000 training
examples, then fine-tuned.
""",
        """\
`metrics.json` adds `sparsity` (of the drawn mask), `remaining_ratio_per_layer`,
`share_s_near_binary` (s within 0.01 of 0 or 1), `s_histogram`, `test_error_before_finetune` and
`magnitude_test_error`; `report.md` plots `remaining_ratio.png` (Fig. 3) and `keep_probabilities.png`
(Fig. 5). `python benchmarks/projection.py [--size 10000000]` times the bisection projection against
a sort-based exact projection in one run (CPU, and CUDA when present).
""",
    ),
    "saliency": (
        """\
Packaged `criteria-mlp`: the MLP 784-300-100-10 with tanh and Glorot weights, 50,000 / 10,000
train/validation images (`data.validation = true`), 400 epochs of SGD at 0.01 with momentum 0.9,
`optim.weight_decay` = 5e-4, batches of 100, 98.85% pruned, fine-tuning as long as training. The
criteria are functions of `bayesprune.core.criteria` shared with PFT and PBP: MP (|θ|, eq. 4's ranking),
OBD ½ G_kk θ_k² with the diagonal generalised Gauss-Newton (eq. 3, appendix A; not the empirical
Fisher), LM |∂L/∂θ_k θ_k| (eq. 6), QM |−∂L/∂θ_k θ_k + ½ G_kk θ_k²| (eq. 5), SNIP and random, each
with the step-size penalty λ/2·θ_k² (section 3.2). The trained network is pruned to `sparsity` in π
stages without weight updates (Algorithm 1; κ_i = 1 − (1 − κ)^{i/π} for the exponential schedule,
whose printed formula in the paper is garbled), the saliencies re-estimated on 1,000 random training
examples per stage; every (criterion, π, λ) records ΔL = |L(θ ⊙ m) − L(θ)| on 10,000 training
examples and the validation error before pruning, after pruning and after fine-tuning the mask. The
dense network trains for `train.epochs`.
""",
        """\
`metrics.json` adds, in `grid` order (`[criterion, π, λ]`), `delta_loss`, `error_after_pruning`,
`error_after_finetune`, `gap_before_finetune`, `gap_after_finetune` (points; null where not
fine-tuned), `error_before_pruning`, `spearman_rho` (ΔL against the gap after fine-tuning, all
fine-tuned points), and `best`: per criterion the lowest-ΔL point at the largest π with its
`delta_loss`, `gap_before_finetune`, `gap_after_finetune` and `rho`. `report.md` plots ΔL against λ
for each π (`delta_loss.png`, Fig. 1) and the gap after fine-tuning against ΔL
(`gap_vs_delta_loss.png`, Fig. 3). OBD and QM compute the Gauss-Newton diagonal at every stage
(14-19 s per stage of 1,000 examples on one CPU thread for this MLP): the packaged grid is meant for
a GPU; `--set saliency.stages=[1,14]` and fewer epochs give a look on a CPU.
""",
    ),
    "sparse-vd": (
        """\
Packaged `sparse-vd-digits`, `sparse-vd-lenet300`, `sparse-vd-lenet5`. The method's package,
`bayesprune/methods/sparse_vd/`, is the worked example of writing a method (see the README).
""",
        "",
    ),
}


class UndocumentedField(Exception):
    """Fields without a description, listed as ``section.field``."""


def attributes(cls) -> dict:
    """Field name → description from the ``Attributes:`` section of ``cls``'s docstring (Google style).

    An entry ``a, b: text`` describes both fields; its text is keyed by the tuple ``("a", "b")`` as well,
    so that the table gives them one row.
    """
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    if "Attributes:" not in lines:
        return {}
    groups, names = {}, None
    for line in lines[lines.index("Attributes:") + 1 :]:
        if line and not line.startswith(" "):
            break  # the section ends at the next unindented line
        entry = re.match(r" {4}([\w, ]+):(?:\s+(.*)|$)", line)
        if entry:
            names = tuple(name.strip() for name in entry.group(1).split(","))
            groups[names] = entry.group(2) or ""
        elif names and line.strip():
            groups[names] = f"{groups[names]} {line.strip()}".strip()
    found = {}
    for names, text in groups.items():
        found.update({name: text for name in names})
        if len(names) > 1:
            found[names] = text
    return found


def prose(cls) -> str:
    """The docstring of ``cls`` after its first paragraph and without its ``Attributes:`` section, as markdown."""
    doc = (inspect.getdoc(cls) or "").split("\nAttributes:")[0]
    parts = doc.split("\n\n", 1)
    return markdown(parts[1].strip()) if len(parts) > 1 else ""


def summary(cls) -> str:
    """The first paragraph of ``cls``'s docstring, as markdown."""
    return markdown((inspect.getdoc(cls) or "").split("\n\n")[0])


def markdown(text: str) -> str:
    """reST inline markup as markdown: ``code`` and :role:`~target` to `code`, table pipes escaped."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1)}`", text)
    text = text.replace("``", "`")
    return (
        " ".join(text.split()) if "\n\n" not in text else "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))
    )


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def toml_value(value) -> str:
    """A default as it is written in TOML (unset: a dash)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and math.isinf(value):
        return "`inf`" if value > 0 else "`-inf`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(toml_value(v).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(section: str, cls, descriptions: dict, instance, skip=("options",)) -> list:
    """The rows of one option table; every field needs a description (else :class:`UndocumentedField`).

    A field without an entry of its own that another entry names as ``field`` (``theta_tol`` in the
    entry of ``condition``) is described there, and its row points to that entry.
    """
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    descriptions = dict(descriptions)
    for name in names:
        if not descriptions.get(name):
            owner = next(
                (key for key, text in descriptions.items() if text and f"``{name}``" in text and key in names), None
            )
            if owner:
                descriptions[name] = f"see ``{owner}``"
    missing = [f"{section}.{name}" for name in names if not descriptions.get(name)]
    if missing:
        raise UndocumentedField(missing)
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    done = set()
    for name in names:
        if name in done:
            continue
        group = next(
            (
                key
                for key in descriptions
                if isinstance(key, tuple) and key[0] == name and all(member in names for member in key)
            ),
            (name,),
        )
        done.update(group)
        keys = ", ".join(f"`{member}`" for member in group)
        defaults = ", ".join(toml_value(getattr(instance, member)) for member in group)
        allowed = "; ".join(dict.fromkeys(allowed_values(cls, member) for member in group))
        rows.append(f"| {keys} | {defaults} | {cell(allowed)} | {cell(markdown(descriptions[name]).rstrip('.'))} |")
    combinations = [
        f"- `{f'{section}.' if section else ''}{rule.key}` must {rule.expectation(instance)}"
        for rule in getattr(cls, "rules", ())
    ]
    if combinations:
        rows += ["", "Refused together (each checked after every key on its own):", "", *combinations]
    return rows


def allowed_values(cls, name: str) -> str:
    """The values the :class:`~bayesprune.core.validation.Constraint` declared on field ``name`` takes."""
    from bayesprune.core.validation import constraint_of

    constraint = constraint_of(cls, name)
    return "" if constraint is None else constraint.describe()


def core_sections():
    from bayesprune.core.optim import OptimConfig
    from bayesprune.pipeline import sections

    return [
        ("data", sections.DataConfig),
        ("model", sections.ModelConfig),
        ("optim", OptimConfig),
        ("train", sections.TrainConfig),
        ("prune", sections.PruneConfig),
        ("baseline", sections.BaselineConfig),
        ("reference", sections.ReferenceConfig),
        ("importance", sections.ImportanceConfig),
    ]


def generate() -> str:
    """The text of ``docs/reference.md``; raises :class:`UndocumentedField` naming every field without a description."""
    from bayesprune.methods import available_methods
    from bayesprune.pipeline.config import RunConfig, packaged_configs

    methods = dict(sorted(available_methods().items()))
    sections = core_sections()
    missing, out = [], []
    core_links = ", ".join(f"[`[{name}]`](#{name})" for name, _ in sections)
    method_links = ", ".join(f"[`[{name}]`](#{name})" for name in methods)
    out.append(INTRO.format(hint=HINT, core_links=core_links, method_links=method_links))

    out.append("## Top level\n")
    run = RunConfig()
    top = [
        f.name
        for f in dataclasses.fields(RunConfig)
        if f.name not in dict(sections) and f.name not in ("experiment", "method_options")
    ]
    try:
        out += table("", RunConfig, TOP, run, skip=[f.name for f in dataclasses.fields(RunConfig) if f.name not in top])
    except UndocumentedField as err:
        missing += [name.lstrip(".") for name in err.args[0]]
    out.append("")

    for name, cls in sections:
        out.append(f"## `[{name}]`\n")
        out.append(capital(summary(cls).replace(f"`[{name}]`: ", "")))
        out.append("")
        if prose(cls):
            out += [prose(cls), ""]
        own = {key.split(".", 1)[1]: text for key, text in CORE.items() if key.startswith(name + ".")}
        descriptions = {**own, **attributes(cls)}
        extra = sorted(set(own) - {f.name for f in dataclasses.fields(cls)})
        if extra:
            raise UndocumentedField([f"{name}.{key} is described in docs/generate.py but is no field" for key in extra])
        try:
            out += table(name, cls, descriptions, cls())
        except UndocumentedField as err:
            missing += err.args[0]
        if name in ("data", "model"):
            out.append(
                f"| `<option>` | | any other key is an option of the {'loader' if name == 'data' else 'builder'}, e.g. "
                + (
                    "`root`, `path`, `test_fraction`, `seed`, `n`, `alpha` |"
                    if name == "data"
                    else "`hidden`, `activation` |"
                )
            )
        out.append("")
        if name == "data":
            out.append(USER_DATA)

    out.append("## Keys each method refuses\n")
    out.append(
        "A method lists the services and config keys it does not use (`Method.unsupported`); the runner "
        "refuses a config that asks for one, or sets such a key to anything but its default, in one line "
        "naming the key. Every other key acts. The pruning levels are those `prune.level` accepts.\n"
    )
    out += ["| method | prune levels | refused | why |", "|---|---|---|---|"]
    for name, cls in methods.items():
        refused = cls().unsupported_for(cls.Options())
        levels = ", ".join(f"`{level}`" for level in cls.prune_levels)
        if not refused:
            out.append(f"| `{name}` | {levels} | — | |")
        for i, (key, why) in enumerate(refused.items()):
            out.append(f"| {f'`{name}`' if i == 0 else ''} | {levels if i == 0 else ''} | `{key}` | {cell(why)} |")
    out.append("")

    configs = packaged_configs()
    for name, cls in methods.items():
        out.append(f"## `[{name}]`\n")
        out += [f"{capital(cls.summary)} ({cls.paper}).", ""]
        out.append(capital(summary(cls.Options).replace(f"`[{name}]`: ", "")))
        out.append("")
        rest = prose(cls.Options)
        if rest:
            out += [rest, ""]
        before, after = PROSE.get(name, ("", ""))
        if before:
            out.append(before)
        try:
            out += table(name, cls.Options, attributes(cls.Options), cls.Options())
        except UndocumentedField as err:
            missing += err.args[0]
        out.append("")
        if after:
            out.append(after)
        own = [config for config in configs if _method_of(config) == name]
        out.append("Packaged configs: " + ", ".join(f"`{config}`" for config in own) + ".\n")
    out += comparison_section()
    if missing:
        raise UndocumentedField(missing)
    return "\n".join(out).rstrip() + "\n"


def comparison_section() -> list:
    """``[compare]`` of a comparison config (``bayesprune compare``), from ``CompareOptions``."""
    from bayesprune.pipeline.compare.options import CompareOptions, comparison_configs

    out = [
        "## `[compare]` (comparison configs)\n",
        "A comparison config (`bayesprune compare [NAME|PATH]`) is a run config without `method`, plus this table "
        "and, optionally, a table per method over its packaged options (`bayesprune.pipeline.compare.options`).",
        "",
    ]
    out += table("compare", CompareOptions, attributes(CompareOptions), CompareOptions())
    out.append("")
    out.append("Packaged comparisons: " + ", ".join(f"`{name}`" for name in comparison_configs()) + ".\n")
    return out


def readme_regions() -> dict:
    """The README's generated regions, name → text, from the registry: the method table (each method's
    ``summary`` and ``paper``) and the quick start, a run of each one's ``<name>-digits`` config."""
    from bayesprune.methods import available_methods

    methods = available_methods()
    table = [
        "| `method` | what it learns | paper |",
        "|---|---|---|",
        *(f"| `{name}` | {cell(cls.summary)} | {cell(cls.paper)} |" for name, cls in methods.items()),
    ]
    commands = [
        "```bash",
        f"for method in {' '.join(methods)}; do",
        "    bayesprune run $method-digits --out runs/$method",
        "done",
        "```",
    ]
    return {"methods": "\n".join(table), "quick start": "\n".join(commands)}


def readme(text: str) -> str:
    """``text`` (the README) with each region between ``<!-- NAME: generated -->`` and ``<!-- end of NAME -->``
    written again by :func:`readme_regions`; a region without its markers raises ``ValueError``."""
    for name, body in readme_regions().items():
        begin, end = f"<!-- {name}: generated -->", f"<!-- end of {name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"README.md has no {begin} ... {end} region")
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    return text


def _method_of(config_name: str) -> str:
    import tomllib

    from bayesprune.pipeline.config import _packaged_files

    return tomllib.loads(_packaged_files()[config_name].read_text()).get("method", "sbnn")


def main() -> int:
    try:
        text = generate()
    except UndocumentedField as err:
        print(
            "docs/generate.py: no description for "
            + ", ".join(err.args[0])
            + " (write one in the Options docstring's Attributes section, or in docs/generate.py's CORE for a core section)",
            file=sys.stderr,
        )
        return 1
    OUTPUT.write_text(text)
    README.write_text(readme(README.read_text()))
    print(f"wrote {OUTPUT} ({len(text.encode())} bytes) and the generated regions of {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
