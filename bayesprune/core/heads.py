"""Attention heads as units: whose heads a group of projections is, how many, and what follows when some leave.

Multi-head attention (Vaswani et al. 2017, section 3.2.2) projects its input to H heads of d channels
each for the query, the key and the value, and an output projection reads the H·d channels of the
heads' results. Removing head h removes its d rows of each of the query, key and value projections and
its d columns of the output projection; the other heads compute what they did. Three layouts are
common, and each is a unit group whose units are heads of ``block = d`` channels
(:func:`bayesprune.core.structure.unit_groups`):

* a packed in-projection inside the module, read as a weight (``nn.MultiheadAttention``, and so
  ``nn.TransformerEncoderLayer`` and torchvision's ViT): its heads are a group of their own, and a
  module that lost heads is a :class:`HeadsRemovedAttention`;
* one fused query/key/value ``Linear`` of 3·H·d rows (timm's ``Attention.qkv``): Torch-Pruning's
  dependency graph maps channel i of the heads' width W = H·d to rows i, W + i and 2W + i of the fused
  layer (its index mapping through the reshape and ``unbind``), so the group's channels are the W;
* separate query, key and value ``Linear`` s (Hugging Face ``transformers``' ViT attention, custom
  modules): a head is d rows of each.

In the last two the head count is read from the attention module (the common parent of the
projections): its ``num_heads`` (timm, PyTorch) or ``num_attention_heads`` (``transformers``), or, for a
module that holds neither, given by ``model.heads`` (:func:`declare_heads`). When
heads leave, :func:`set_heads` updates that count and the module's width attributes (timm's
``attn_dim``, ``transformers``' ``all_head_size``) that its forward reshapes by; whether the smaller
module then computes the masked one is checked, not assumed (:func:`bayesprune.core.export.check_export`).
"""

import functools
from fnmatch import fnmatchcase

import torch
from torch import nn

#: Attributes that hold an attention module's head count, read in this order.
HEAD_COUNTS = ("num_heads", "num_attention_heads")
#: Attributes that hold the heads' total width H·d, updated with the count.
WIDTHS = ("attn_dim", "all_head_size")


def head_count(module: nn.Module):
    """``(attribute, count)``: ``module``'s head count, its first integer attribute of
    :data:`HEAD_COUNTS`; ``None`` without one."""
    for name in HEAD_COUNTS:
        value = getattr(module, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return name, value
    return None


def heads_owner(net: nn.Module, linears: list, consumers, copies: int):
    """The attention module whose heads the channels of a group are, else ``None``: the one parent of
    the group's ``Linear`` producers ``linears``, with a head count, whose producers are a query, key
    and value (two or more ``Linear`` s, or one fused layer whose every channel is ``copies`` ≥ 2 of
    its rows), and whose channels a ``Linear`` reads (the output projection)."""
    parents = {name.rpartition(".")[0] for name in linears}
    if len(parents) != 1 or (len(linears) < 2 and copies < 2):
        return None
    owner = parents.pop()
    reads = any(isinstance(net.get_submodule(name), nn.Linear) for name in consumers)
    return owner if reads and head_count(net.get_submodule(owner)) is not None else None


def declare_heads(net: nn.Module, table: dict) -> nn.Module:
    """Give the modules that ``table`` names (module paths, globs or module type names → head count) the
    attribute ``num_heads``, so that their heads are units, for attention modules that keep their count
    under another name or infer it from their width (``view(..., -1, head_dim)``). Returns ``net``.

    Raises:
        ValueError: a name that matches no module, or a module whose own head count differs.
    """
    modules = dict(net.named_modules())
    for pattern, heads in table.items():
        matched = [
            name
            for name, module in modules.items()
            if name and (fnmatchcase(name, pattern) or type(module).__name__ == pattern)
        ]
        if not matched:
            raise ValueError(f"{pattern!r} names no module of the network")
        for name in matched:
            own = head_count(modules[name])
            if own is not None and own[1] != heads:
                raise ValueError(f"module {name!r} has {own[0]}={own[1]}, not the {heads} heads given for {pattern!r}")
            modules[name].num_heads = heads
    return net


def set_heads(module: nn.Module, heads: int, head_dim: int):
    """After heads of ``module`` left: its head count (:data:`HEAD_COUNTS`) is ``heads``, and each
    width attribute (:data:`WIDTHS`) that held the old heads' width holds ``heads · head_dim``."""
    width = head_count(module)[1] * head_dim
    for name in HEAD_COUNTS:
        if isinstance(getattr(module, name, None), int):
            setattr(module, name, heads)
    for name in WIDTHS:
        if getattr(module, name, None) == width:
            setattr(module, name, heads * head_dim)


def heads_removable(module) -> bool:
    """Are the heads of an ``nn.MultiheadAttention`` separable: one packed projection, no bias or zero
    row added to the keys."""
    if isinstance(module, HeadsRemovedAttention):
        return True
    return module._qkv_same_embed_dim and module.bias_k is None and not module.add_zero_attn


class HeadsRemovedAttention(nn.Module):
    """``nn.MultiheadAttention`` with some of its heads removed: the query, key and value projections
    and the output projection's inputs are ``num_heads · head_dim`` wide, fewer than the embedding.

    ``nn.MultiheadAttention`` cannot hold that (its heads always fill the embedding), so removing
    heads puts this module in its place (:func:`remove_units`). It is called as
    ``nn.MultiheadAttention`` is, returns what it returns (``(output, weights or None)``), and keeps its
    parameter names (``in_proj_weight``, ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``), so
    masks, states and optimiser moments keyed by parameter name carry over. Each head computes
    softmax(q·kᵀ / √head_dim)·v, as there.
    """

    #: The query/key/value width is not the embedding's: ``nn.TransformerEncoderLayer`` reads this
    #: and leaves its fused fast path (which assumes ``nn.MultiheadAttention``'s shapes) for this forward.
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim, num_heads, head_dim, *, bias=True, out_bias=True, dropout=0.0, batch_first=False):
        super().__init__()
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.dropout, self.batch_first = dropout, batch_first
        width = num_heads * head_dim
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * width)) if bias else None
        self.out_proj = nn.Linear(width, embed_dim, bias=out_bias)

    @classmethod
    def keeping(cls, attention: nn.Module, heads: torch.Tensor) -> "HeadsRemovedAttention":
        """``attention`` (``nn.MultiheadAttention`` or this class) with only the heads ``heads``
        (indices), holding copies of their projections."""
        head_dim = attention.head_dim
        width = attention.in_proj_weight.shape[0] // 3
        rows = (heads.view(-1, 1) * head_dim + torch.arange(head_dim)).flatten().to(attention.in_proj_weight.device)
        qkv = torch.cat([rows + k * width for k in range(3)])
        bias = attention.in_proj_bias
        smaller = cls(
            attention.embed_dim,
            len(heads),
            head_dim,
            bias=bias is not None,
            out_bias=attention.out_proj.bias is not None,
            dropout=attention.dropout,
            batch_first=attention.batch_first,
        ).to(attention.in_proj_weight.device, attention.in_proj_weight.dtype)
        with torch.no_grad():
            smaller.in_proj_weight.copy_(attention.in_proj_weight[qkv])
            if bias is not None:
                smaller.in_proj_bias.copy_(bias[qkv])
            smaller.out_proj.weight.copy_(attention.out_proj.weight[:, rows])
            if smaller.out_proj.bias is not None:
                smaller.out_proj.bias.copy_(attention.out_proj.bias)
        return smaller.train(attention.training)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        if not self.batch_first or unbatched:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        batch, length, source = query.shape[0], query.shape[1], key.shape[1]
        weights = self.in_proj_weight.chunk(3)
        biases = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
        q, k, v = (
            nn.functional.linear(x, w, b).view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)
            for x, w, b in zip((query, key, value), weights, biases)
        )
        if attn_mask is None and is_causal:
            attn_mask = torch.ones(length, source, dtype=torch.bool, device=q.device).triu(1)
        bias = None  # additive: -inf where a query may not look (True in a boolean mask, as in nn.MultiheadAttention)
        for mask in (
            None
            if attn_mask is None
            else attn_mask.view(-1, self.num_heads if attn_mask.dim() == 3 else 1, length, source),
            None if key_padding_mask is None else key_padding_mask.view(batch, 1, 1, source),
        ):
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(mask, float("-inf"))
            if mask is not None:
                bias = mask.to(q.dtype) if bias is None else bias + mask.to(q.dtype)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            scores = q @ k.transpose(-2, -1) / self.head_dim**0.5
            attention = nn.functional.dropout((scores if bias is None else scores + bias).softmax(-1), dropout)
            mixed = attention @ v
        else:
            mixed = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
        output = self.out_proj(mixed.transpose(1, 2).reshape(batch, length, -1))
        if not self.batch_first or unbatched:
            output = output.transpose(0, 1)
        if not need_weights:
            return (output.squeeze(1) if unbatched else output), None
        if unbatched:
            output, attention = output.squeeze(1), attention.squeeze(0)
        return output, attention.mean(-3) if average_attn_weights else attention


#: Attention modules whose heads are unit groups of their own (their embedding is no unit).
ATTENTION = (nn.MultiheadAttention, HeadsRemovedAttention)


@functools.cache
def embedding_pruner():
    """Torch-Pruning's view of a :class:`HeadsRemovedAttention`: one operation whose input and output
    channels are the embedding (its heads are unit groups of their own). Built on first use: importing
    Torch-Pruning (timm, torchvision, torch._dynamo with it) costs seconds that a run of an unstructured
    method never needs."""
    import torch_pruning as tp

    class EmbeddingPruner(tp.pruner.function.BasePruningFunc):
        def prune_out_channels(self, layer, idxs):
            keep = sorted(set(range(layer.embed_dim)) - set(idxs))
            layer.in_proj_weight = self._prune_parameter_and_grad(layer.in_proj_weight, keep, 1)
            tp.prune_linear_out_channels(layer.out_proj, idxs)
            layer.embed_dim = len(keep)
            return layer

        prune_in_channels = prune_out_channels

        def get_out_channels(self, layer):
            return layer.embed_dim

        get_in_channels = get_out_channels

    return EmbeddingPruner()


def heads_removed_macs(module, inputs, output):
    """Torch-Pruning's count of ``nn.MultiheadAttention`` (``multihead_attention_counter_hook``) for a
    :class:`HeadsRemovedAttention` of embedding E and H heads of d channels
    (width W = H·d): the queries scaled (L·W), the query, key and value projections (E·W products and W
    bias additions per token), each head's scores, softmax and weighted sum (L·S·d + L·S + L·S·d), and
    the output projection with its bias (L·(W·E + E)); with every head kept, W = E and it is that hook's
    count."""
    query, key, value = inputs[:3]
    batch_dim, length_dim = (0, 1) if module.batch_first and query.dim() == 3 else (1, 0)
    batch = query.shape[batch_dim] if query.dim() == 3 else 1
    length, source = query.shape[length_dim], key.shape[length_dim]
    embed, heads, head_dim = module.embed_dim, module.num_heads, module.head_dim
    width = heads * head_dim
    macs = length * width + (length + 2 * source) * embed * width
    if module.in_proj_bias is not None:
        macs += (length + 2 * source) * width
    macs += heads * (2 * length * source * head_dim + length * source)
    macs += length * (width * embed + embed)
    module.__flops__ += int(macs * batch)
