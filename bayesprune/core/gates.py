"""The stochastic gate: Bernoulli keep-probabilities of some sites, and interchangeable estimators.

A gate keeps each entry of its sites with probability p: every weight of a Linear/Conv weight
(PFT's and PBP's λ, paper 000, section 2; ProbMask's s, paper 002) or every unit of a network's
unit groups: channels, filters, attention heads (θ of paper 004, eq. 1). What is common is written once in :class:`StochasticGate`:
the keep-probabilities under a parameterisation of the trained raw values, rank scores, relaxed
draws, exact draws, the histogram and the expected sparsity. The two granularities differ only in
how the raw values are held and applied:

* :class:`StochasticMasks`: one keep-probability per weight in a single flat vector (an optimiser
  step is one operation), ``"sigmoid"`` (λ = σ(ρ)) or ``"clamp"`` (λ = clamp(ρ, 0, 1)), paper 000,
  appendix B.1; applied with :func:`bayesprune.core.pruning.apply_masks`;
* :class:`UnitGates`: θ of every unit held directly (``"probability"``), the groups' vectors laid
  end to end in one flat vector (a draw, the hyper-prior's term, the pruning condition and an
  optimiser step are one operation each, however many groups are gated); applied by
  :meth:`UnitGates.applied`, which scales the unit's input columns in every consumer (eq. 1).

An estimator (:mod:`bayesprune.core.estimators`) draws one step's gate values from any gate and estimates the data part of
∂L/∂p (paper 004, section 3; eq. 19's C1 − C0):

* :class:`Taylor`: exact Bernoulli draws, first order around the sample (eq. 22), the
  straight-through estimator;
* :class:`Concrete`: the relaxed gate of temperature t and the path derivative ∂C/∂p (paper 004,
  eq. 23; paper 000, appendix B.3; ProbMask's two-Gumbel relaxation, paper 002, eqs. 3-5), what
  :meth:`StochasticGate.relaxed` draws;
* :class:`Exact`: two passes per unit, switching it with every other gate kept (eq. 25);
* :class:`Hybrid`: Taylor, with the exact difference for the units of largest weights (section 3.3.4).

:func:`block_isotropic` and :func:`isotropic` set keep-probabilities from a criterion's scores at an
expected sparsity s (paper 000, appendix A.1, eq. 6), the start of PFT's and PBP's masks.
"""

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from bayesprune.core.estimators import Concrete, Estimator
from bayesprune.core.pruning import Budget, lexicographic_ranks, prune
from bayesprune.core.structure import (
    HeadsRemovedAttention,
    dependency_graph,
    example_input,
    input_shape_of,
    shrunk,
    unit_groups,
)

#: Parameterisations of a trained mask's raw values (appendix B.1 of paper 000).
PARAMETERIZATIONS = ("sigmoid", "clamp")


INITS = ("block", "isotropic")


#: A sigmoid-parameterised λ⁰ of exactly 0 or 1 is clipped to [ε, 1 − ε] to start its logit ρ.
_LOGIT_EPS = 1e-6


def block_isotropic(scores: dict, sparsity: float, epsilon: float) -> dict:
    """Eq. 6: λ⁰_i = 1 − sε/(1 − s) for the k = (1 − s)·D weights of highest score (ranked globally), ε
    for the others, so that the expected sparsity is s. Needs sε/(1 − s) < 1."""
    if not sparsity * epsilon / (1 - sparsity) < 1:
        raise ValueError(f"block-isotropic probabilities need s·ε/(1 − s) < 1, got s = {sparsity}, ε = {epsilon}")
    kept = prune(scores, Budget(sparsity=sparsity))
    high = 1 - sparsity * epsilon / (1 - sparsity)
    return {site: torch.where(mask, high, epsilon).to(torch.float32) for site, mask in kept.items()}


def isotropic(scores: dict, sparsity: float) -> dict:
    """Isotropic λ⁰_i = 1 − s for every weight (random pruning at expected sparsity s, appendix A.1)."""
    return {site: torch.full(score.shape, 1 - sparsity, device=score.device) for site, score in scores.items()}


class StochasticGate(nn.Module):
    """Keep-probabilities p of the entries of some sites, held as raw tensors under a parameterisation.

    A subclass holds the raw tensors (:meth:`raw_tensors`) and says which site each entry belongs to
    (:meth:`_to_sites`); everything else is computed here, tensor by raw tensor.

    Attributes:
        parameterization: ``"sigmoid"`` (p = σ(ρ)), ``"clamp"`` (p = clamp(ρ, 0, 1)) or
            ``"probability"`` (p = ρ, kept in [0, 1] by its training).
        temperature: t of the Concrete relaxation :meth:`relaxed` draws.
    """

    parameterization: str = "probability"
    temperature: float = 0.5

    def raw_tensors(self) -> list:
        """The trained raw tensors."""
        raise NotImplementedError

    def _to_sites(self, tensors: list) -> dict:
        """Site name → values, from one tensor per raw tensor."""
        raise NotImplementedError

    @property
    def sites(self) -> list:
        raise NotImplementedError

    def keep_probabilities(self) -> list:
        """p of every raw tensor (differentiable)."""
        if self.parameterization == "sigmoid":
            return [torch.sigmoid(raw) for raw in self.raw_tensors()]
        if self.parameterization == "clamp":
            return [raw.clamp(0.0, 1.0) for raw in self.raw_tensors()]
        return list(self.raw_tensors())

    def probabilities(self) -> dict:
        """p of every site (differentiable)."""
        return self._to_sites(self.keep_probabilities())

    def logits(self) -> dict:
        """logit p of every site in float64, the score that ranks them without saturating at p = 1."""
        raws = [raw.detach().double() for raw in self.raw_tensors()]
        if self.parameterization == "sigmoid":
            return self._to_sites(raws)
        return self._to_sites([torch.logit(raw.clamp(0.0, 1.0), eps=1e-12) for raw in raws])

    def draw(self, estimator: Estimator) -> dict:
        """One step's gate values of every site, drawn by ``estimator``."""
        return self._to_sites(estimator.values(self))

    def relaxed(self) -> dict:
        """One Concrete(p, 1 − p) draw of temperature t per entry (paper 000, appendix B.3), differentiable in p."""
        return self.draw(Concrete(self.temperature))

    @torch.no_grad()
    def sample(self, generator=None) -> dict:
        """One exact draw b ~ Bernoulli(p) per entry."""
        return {site: torch.bernoulli(p, generator=generator) for site, p in self.probabilities().items()}

    def histogram(self, bins: int = 20) -> list:
        """Counts of p in ``bins`` equal bins of [0, 1] over every entry (paper 000, Fig. 11)."""
        p = torch.cat([p.detach().flatten().float().cpu() for p in self.keep_probabilities()])
        return torch.histc(p, bins=bins, min=0, max=1).tolist()

    def expected_sparsity(self) -> float:
        """1 − mean p over every entry."""
        return 1.0 - float(torch.cat([p.detach().flatten() for p in self.keep_probabilities()]).double().mean())


class StochasticMasks(StochasticGate):
    """Keep-probabilities λ of every weight of some sites (paper 000, section 2), in one flat raw vector.

    Args:
        init: site name → λ at the start.
        parameterization: ``"sigmoid"`` (λ = σ(ρ), ρ trained) or ``"clamp"`` (λ = clamp(ρ, 0, 1)), appendix B.1.
        temperature: β of the Concrete relaxation (0.5 in the paper).
    """

    def __init__(self, init: dict, *, parameterization: str = "sigmoid", temperature: float = 0.5):
        super().__init__()
        if parameterization not in PARAMETERIZATIONS:
            raise ValueError(f"parameterization must be one of {list(PARAMETERIZATIONS)}, got {parameterization!r}")
        self.shapes = {site: lam.shape for site, lam in init.items()}
        self.parameterization, self.temperature = parameterization, temperature
        flat = torch.cat([lam.detach().flatten().double() for lam in init.values()])
        raw = torch.logit(flat, eps=_LOGIT_EPS) if parameterization == "sigmoid" else flat
        self.raw = nn.Parameter(raw.float())  # one flat vector: an optimiser step is one operation

    @property
    def sites(self) -> list:
        return list(self.shapes)

    def raw_tensors(self) -> list:
        return [self.raw]

    def _to_sites(self, tensors: list) -> dict:
        chunks = torch.split(tensors[0], [shape.numel() for shape in self.shapes.values()])
        return {site: chunk.view(shape) for (site, shape), chunk in zip(self.shapes.items(), chunks)}

    def ranks(self, tiebreak: dict) -> dict:
        """Scores without ties ordering the weights by λ, and by ``tiebreak`` (e.g. |W|) among equal λ (a
        clamped λ saturates at exactly 0 or 1): a budget over them keeps the weights of largest λ (PFT,
        stage 2.3)."""
        return lexicographic_ranks(self.logits(), tiebreak)


#: Modules that may produce a gated group's units: each of their outputs is one unit's own. A group
#: holding another producer (a ``LayerNorm`` or ``GroupNorm`` normalises across the units, so closing a
#: gate at the consumers is not removing the unit) has no gate.
GATED_PRODUCERS = (nn.Linear, nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm)


#: Modules whose input channels a gate scales: dimension 1 of a convolution's input (not grouped), the
#: last of a Linear's.
GATED_CONSUMERS = (nn.Linear, nn.modules.conv._ConvNd)


@dataclass(frozen=True)
class _Reader:
    """A module that reads gated units as input channels: for each gated group it reads, the input
    channels (``columns``) and the group's unit of each (``units``). ``per_unit`` is set where one
    group's units are all its inputs, in order, each a block of ``per_unit`` channels (a chain's next
    layer; a flattened channel's H·W columns): the scale is then the gate values repeated."""

    channel_dim: int
    inputs: int
    reads: tuple
    per_unit: int | None


class UnitGates(StochasticGate):
    """θ of every unit of ``net``'s unit groups (:func:`bayesprune.core.structure.unit_groups`), one gate
    per group unit, held directly (``"probability"``) and kept in [0, 1] by its training (paper 004,
    Algorithm 1): the groups' vectors end to end in the one trained tensor :attr:`raw`, read per group
    through :attr:`theta`.

    A gate multiplies its unit's input channel in every consumer of the group (eq. 1's ξ on the unit's
    output, applied where it is read), so that a gate at 0 computes the network with the unit removed
    from every coupled layer (residual additions, batch norms, depthwise convolutions), as
    :func:`bayesprune.core.structure.shrunk` removes it. An attention's heads are gated at its output
    projection, once :func:`separable_heads` holds it as a module. A group that another module reads
    or produces (:data:`GATED_PRODUCERS`, :data:`GATED_CONSUMERS`) has no gate: its root and the reason
    are in :attr:`ungated`. For a plain chain the groups are its hidden layers, and a consumer reading
    one group's units in order is scaled by the repeated gate values, as the layer-chain gates did.

    Args:
        net: the network; the group feeding its output has no gate.
        init: θ(0) of every unit (0.5 in the paper).
        input_shape: one input's shape, to trace the network.
    """

    def __init__(self, net: nn.Module, *, init: float = 0.5, input_shape=None):
        super().__init__()
        self._trace(net, input_shape)
        theta = torch.full((), float(init), device=next(net.parameters()).device)
        self.raw = nn.Parameter(theta.expand(sum(self.units)).clone())

    def _trace(self, net: nn.Module, input_shape):
        self.input_shape = input_shape_of(net, input_shape)
        graph = dependency_graph(net, self.input_shape)
        names = {module: name for name, module in net.named_modules()}
        device = next(net.parameters()).device
        self.groups, self.ungated, self.producers = [], {}, []
        reads = {}
        for group in unit_groups(net, graph=graph):
            root = net.get_submodule(group.name)
            if isinstance(root, HeadsRemovedAttention):  # a head's output is read by the output projection alone
                units = torch.arange(group.units, device=device).repeat_interleave(group.block)
                columns = group.channel_indices().flatten().to(device)
                reads.setdefault(f"{group.name}.out_proj", []).append((len(self.groups), columns, units))
                self.groups.append(group)
                self.producers.append({})
                continue
            if not isinstance(root, (nn.Linear, nn.modules.conv._ConvNd)):
                self.ungated[group.name] = f"the heads of {type(root).__name__} are gated after separable_heads"
                continue
            unit_of = torch.empty(group.channels, dtype=torch.long)  # the unit of each of the root's channels
            unit_of[group.channel_indices()] = torch.arange(group.units).view(-1, 1)
            items = graph.get_pruning_group(
                root, graph.get_pruner_of_module(root).prune_out_channels, list(range(group.channels))
            )
            rows, columns, why = {}, {}, None
            for item in items:
                name = names.get(item.dep.target.module)
                if name is None:
                    continue  # an operation without parameters: additions, concatenations, reshapes
                module = net.get_submodule(name)
                index = (
                    torch.tensor(item.idxs, dtype=torch.long, device=device),
                    unit_of[torch.tensor(item.root_idxs, dtype=torch.long)].to(device),
                )
                if graph.is_out_channel_pruning_fn(item.dep.handler):
                    if not isinstance(module, GATED_PRODUCERS):
                        why = f"module {name!r} ({type(module).__name__}) mixes its units"
                    elif not isinstance(module, nn.modules.batchnorm._BatchNorm):
                        rows[name] = index
                elif not isinstance(module, GATED_CONSUMERS) or getattr(module, "groups", 1) != 1:
                    why = f"module {name!r} ({type(module).__name__}) reads its units"
                else:
                    columns[name] = index
            for name in rows:  # a depthwise convolution is a producer: its output is gated where it is read
                columns.pop(name, None)
            if why is not None or not columns:
                self.ungated[group.name] = why or "nothing reads its units through a Linear or convolution"
                continue
            for name, index in columns.items():
                reads.setdefault(name, []).append((len(self.groups), *index))
            self.groups.append(group)
            self.producers.append(rows)
        self.units = [group.units for group in self.groups]
        self.readers = {name: self._reader(net.get_submodule(name), group_reads) for name, group_reads in reads.items()}

    def _reader(self, module, reads) -> _Reader:
        conv = isinstance(module, nn.modules.conv._ConvNd)
        inputs = module.in_channels if conv else module.in_features
        per_unit = None
        if len(reads) == 1:
            group, columns, units = reads[0]
            block = inputs // self.units[group]
            in_order = torch.arange(inputs, device=columns.device)
            if (
                block * self.units[group] == inputs
                and torch.equal(columns, in_order)
                and torch.equal(units, in_order // block)
            ):
                per_unit = block
        return _Reader(1 if conv else -1, inputs, tuple(reads), per_unit)

    def restricted(self, net: nn.Module, keep: list) -> "UnitGates":
        """The gates of ``net``, this network without the units where ``keep`` (one mask per gated group)
        is false (:func:`bayesprune.core.structure.shrunk`), holding the kept units' θ.

        The groups are this network's with fewer units, and each row and column their index left after
        the removed ones: not traced again, which would also see other groups where a depthwise
        convolution is left one channel (Torch-Pruning then takes it for an ordinary one)."""
        gates = UnitGates.__new__(UnitGates)
        super(UnitGates, gates).__init__()
        gates.input_shape, gates.ungated = self.input_shape, dict(self.ungated)
        keep = [k.to(self.raw.device) for k in keep]
        new_unit = [torch.cumsum(k.long(), 0) - 1 for k in keep]
        gates.groups = [dataclasses.replace(group, units=int(k.sum())) for group, k in zip(self.groups, keep)]
        gates.units = [group.units for group in gates.groups]
        gates.producers = []
        for group, rows in enumerate(self.producers):
            gates.producers.append(
                {
                    name: _kept(index, units, keep[group], new_unit[group], index[~keep[group][units]])
                    for name, (index, units) in rows.items()
                }
            )
        gates.readers = {}
        for name, reader in self.readers.items():
            removed = torch.cat([columns[~keep[group][units]] for group, columns, units in reader.reads])
            reads = [
                (group, *_kept(columns, units, keep[group], new_unit[group], removed))
                for group, columns, units in reader.reads
            ]
            gates.readers[name] = gates._reader(net.get_submodule(name), reads)
        gates.raw = nn.Parameter(self.raw.detach()[torch.cat(keep)])
        return gates

    @torch.no_grad()
    def check_removal(self, net: nn.Module):
        """Raise ``ValueError`` unless gates at 0 compute ``net`` with their units removed
        (:func:`bayesprune.core.structure.shrunk`), on probe inputs in eval mode, every other unit of each
        group closed; naming the first group for which they do not (an operation that mixes its units
        where the dependency graph cannot see)."""
        keep = [torch.arange(units, device=self.raw.device) % 2 == 0 for units in self.units]
        if self._closes_as_removed(net, keep):
            return
        for index, group in enumerate(self.groups):
            alone = [k if i == index else torch.ones_like(k) for i, k in enumerate(keep)]
            if not self._closes_as_removed(net, alone):
                raise ValueError(
                    f"module {group.name!r}: a closed gate of its units does not compute the network with the "
                    "units removed (an operation mixes them where the dependency graph cannot see)"
                )

    def _closes_as_removed(self, net, keep) -> bool:
        smaller, _ = shrunk(net, {site: k.cpu() for site, k in zip(self.sites, keep)}, input_shape=self.input_shape)
        x = example_input(net, self.input_shape)
        training = net.training
        net.eval()
        smaller.eval()
        try:
            with self.applied(net, [k.to(x.dtype) for k in keep]):
                gated = net(x)
        finally:
            net.train(training)
        expected = smaller(x)
        return (gated - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()  # at its own scale

    @property
    def theta(self) -> list:
        """θ of every gated group, in order: views of :attr:`raw` (written through under ``no_grad``)."""
        return self.per_layer(self.raw)

    def per_layer(self, flat: torch.Tensor) -> list:
        """A tensor laid out as :attr:`raw` (a draw, a gradient, a mask), split into one view per gated group."""
        return list(flat.split(self.units))

    @property
    def sites(self) -> list:
        """``"<root>.gate"`` of every gated group, in order."""
        return [group.gate_site for group in self.groups]

    def raw_tensors(self) -> list:
        return [self.raw]

    def _to_sites(self, tensors: list) -> dict:
        return dict(zip(self.sites, self.per_layer(tensors[0])))

    def scale(self, reader: _Reader, values: list) -> torch.Tensor:
        """The factor of each input channel of a reader under the gate ``values`` (one tensor per group)."""
        if reader.per_unit is not None:
            value = values[reader.reads[0][0]]
            return value if reader.per_unit == 1 else value.repeat_interleave(reader.per_unit)
        scale = torch.ones(reader.inputs, dtype=values[0].dtype, device=values[0].device)
        for group, columns, units in reader.reads:
            scale = scale.index_put((columns,), values[group][units])
        return scale

    @contextmanager
    def applied(self, net: nn.Module, values: list):
        """Within the block, ``net`` multiplies each gated unit's output by its value in ``values``, in
        every module that reads it."""

        def gate(reader):
            def hook(module, args):
                x = args[0]
                scale = self.scale(reader, values)
                if reader.channel_dim == 1:
                    scale = scale.view(1, -1, *([1] * (x.dim() - 2)))
                return (x * scale.to(x.dtype), *args[1:])

            return hook

        handles = [
            net.get_submodule(name).register_forward_pre_hook(gate(reader)) for name, reader in self.readers.items()
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def _kept(index, units, keep, new_unit, removed) -> tuple:
    """``(index, units)`` of a module's rows or columns of one group after the removal: those of kept
    units, each index less the ``removed`` indices before it, each unit its index among the kept."""
    stays = keep[units]
    index = index[stays]
    return index - torch.searchsorted(removed.sort().values, index), new_unit[units[stays]]


def separable_heads(net: nn.Module, input_shape=None) -> nn.Module:
    """``net`` with every ``nn.MultiheadAttention`` whose heads are units replaced, in place, by a
    :class:`~bayesprune.core.structure.HeadsRemovedAttention` holding all its heads: the same
    computation and parameter names, but its output projection is called as a module, where
    :class:`UnitGates` scales a head's columns (``nn.MultiheadAttention`` reads the projection's
    weight inside its functional forward). Returns ``net``."""
    for group in unit_groups(net, input_shape):
        attention = net.get_submodule(group.name)
        if isinstance(attention, nn.MultiheadAttention):
            parent, _, child = group.name.rpartition(".")
            whole = HeadsRemovedAttention.keeping(attention, torch.arange(attention.num_heads))
            setattr(net.get_submodule(parent), child, whole)
    return net


def unit_weight_norms(net: nn.Module, gates: UnitGates) -> list:
    """‖w_b‖² + ‖w_f‖² of every gated unit: its fan-in weights and biases (its rows in the group's
    ``Linear``/``Conv`` producers) and its fan-out columns in every consumer (Fig. 1), the quantity
    Algorithm 1 bounds by 2 φ_max."""
    parameter = next(net.parameters())
    norms = [torch.zeros(units, dtype=parameter.dtype, device=parameter.device) for units in gates.units]
    for norm, rows in zip(norms, gates.producers):
        for name, (index, units) in rows.items():
            module = net.get_submodule(name)
            norm.index_add_(0, units, module.weight.detach()[index].flatten(1).pow(2).sum(1))
            if module.bias is not None:
                norm.index_add_(0, units, module.bias.detach()[index].pow(2))
    for name, reader in gates.readers.items():
        weight = net.get_submodule(name).weight.detach()
        columns_first = weight.transpose(0, 1)
        if reader.per_unit is not None:  # every column, in order; a flattened channel owns a block of them
            group = reader.reads[0][0]
            norms[group] += columns_first.flatten(1).pow(2).sum(1).view(-1, reader.per_unit).sum(1)
            continue
        for group, columns, units in reader.reads:
            norms[group].index_add_(0, units, columns_first[columns].flatten(1).pow(2).sum(1))
    return norms


@torch.no_grad()
def project_unit_weights(net: nn.Module, gates: UnitGates, phi_max: float):
    """Scale each unit's fan-in and fan-out weights so that ‖w_b‖² + ‖w_f‖² ≤ 2 φ_max (Algorithm 1, step 11)."""
    scales = [
        torch.sqrt((2 * phi_max / norm.clamp_min(1e-30)).clamp(max=1.0)) for norm in unit_weight_norms(net, gates)
    ]
    for group, (scale, rows) in enumerate(zip(scales, gates.producers)):
        if not bool((scale < 1).any()):
            continue
        for name, (index, units) in rows.items():
            module = net.get_submodule(name)
            factor = torch.ones(module.weight.shape[0], device=scale.device).index_put((index,), scale[units])
            module.weight.mul_(factor.view(-1, *([1] * (module.weight.dim() - 1))))
            if module.bias is not None:
                module.bias.mul_(factor)
        alone = [scale if other == group else torch.ones_like(s) for other, s in enumerate(scales)]
        for name, reader in gates.readers.items():
            if any(read[0] == group for read in reader.reads):
                weight = net.get_submodule(name).weight
                weight.mul_(gates.scale(reader, alone).view(1, -1, *([1] * (weight.dim() - 2))))
