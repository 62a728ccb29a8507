"""An ONNX file of a network, for ONNX Runtime and the runtimes that read ONNX, written quietly.

``torch.onnx``'s exporter hands the program to onnxscript's optimiser, which logs a warning for every
node it leaves unfolded because it has several outputs: one per ``Split`` of a packed query/key/value
weight, so a transformer printed a screenful per export. :func:`save_onnx` drops those records
(:data:`PER_NODE_MESSAGES`) and no others: a warning about the network or its data still reaches the
user.
"""

import logging
from contextlib import contextmanager

import torch
from torch import nn

from bayesprune.core.export import program

#: The packages :func:`save_onnx` and :func:`run_onnx` need (the extra ``bayesprune[onnx]``).
ONNX_PACKAGES = ("onnx", "onnxruntime", "onnxscript")
#: The optimiser's logger, and the start of the per-node messages it writes that :func:`save_onnx` drops.
OPTIMIZER_LOGGER = "onnxscript.optimizer._constant_folding"
PER_NODE_MESSAGES = ("Skipping constant folding for op",)


def missing_onnx_packages() -> list:
    """The packages of :data:`ONNX_PACKAGES` that are not installed."""
    import importlib.util

    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def save_onnx(net: nn.Module, path, example_input: torch.Tensor):
    """Write ``net`` as one ONNX file (weights inside, batch dimension dynamic): :func:`torch.export.export`
    as :func:`bayesprune.core.export.save_portable` does, then ``torch.onnx``'s exporter of that program
    (it needs ``onnx`` and ``onnxscript``), without the optimiser's per-node messages."""
    with _without_per_node_messages():
        torch.onnx.export(program(net, example_input), (example_input,), str(path), external_data=False, verbose=False)


class _PerNodeFilter(logging.Filter):
    def filter(self, record) -> bool:
        return not str(record.msg).startswith(PER_NODE_MESSAGES)


@contextmanager
def _without_per_node_messages():
    logger, per_node = logging.getLogger(OPTIMIZER_LOGGER), _PerNodeFilter()
    logger.addFilter(per_node)
    try:
        yield
    finally:
        logger.removeFilter(per_node)


def run_onnx(path, batches) -> torch.Tensor:
    """The outputs of the ONNX file ``path`` at each input tensor of ``batches`` (float32, on the CPU),
    concatenated, computed by ONNX Runtime's CPU provider."""
    from bayesprune.core.quiet import import_onnxruntime

    session = import_onnxruntime().InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    parts = [session.run(None, {name: batch.detach().cpu().float().numpy()})[0] for batch in batches]
    return torch.cat([torch.from_numpy(part) for part in parts])
