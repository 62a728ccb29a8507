"""Third-party printouts and files that say nothing about the user's run, kept out of their terminal and
their folders: what a library prints or logs while it fails (torch.export's partial graph), written out only
when the call succeeds; the files ONNX Runtime writes into the user's cache folder when imported; a library's
notices about itself (:data:`NOTICES`)."""

import contextlib
import importlib
import io
import logging
import os
import sys
import tempfile
import warnings

#: Third-party warnings about the library itself, never about the user's run or data: ``(category, module,
#: start of the message)``, each ignored by :func:`ignore_notices` and nothing else of that module.
NOTICES = (
    # ArviZ, once a day on import: its coming refactor (bayesprune pins its range in setup.cfg)
    (FutureWarning, "arviz", r"\s*ArviZ is undergoing a major refactor"),
)


def ignore_notices():
    """Ignore the warnings of :data:`NOTICES`, matched by category, module and message: any other warning of
    those libraries (about the user's data, a deprecated call) still reaches the user."""
    for category, module, message in NOTICES:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


@contextlib.contextmanager
def printouts_dropped():
    """Run the block with log records held back and ``sys.stderr`` captured: torch.export prints the
    partial graph (tens of lines) and logs its guesses before raising; what the block printed is written
    out only when it succeeds."""
    captured, disabled = io.StringIO(), logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        logging.disable(disabled)
    sys.stderr.write(captured.getvalue())


def import_onnxruntime():
    """``onnxruntime``, imported with ``XDG_CACHE_HOME`` pointed at a temporary folder, removed after: on import
    it writes a device id and a database into ``$XDG_CACHE_HOME/Microsoft/DeveloperTools`` (its telemetry),
    which bayesprune's session has no use for."""
    if "onnxruntime" in sys.modules:
        return sys.modules["onnxruntime"]
    previous = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="bayesprune-onnxruntime-") as folder:
        os.environ["XDG_CACHE_HOME"] = folder
        try:
            return importlib.import_module("onnxruntime")
        finally:
            if previous is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = previous
