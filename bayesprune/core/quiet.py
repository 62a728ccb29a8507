"""Third-party printouts that say nothing about the user's run, kept out of their terminal: what a
library prints or logs while it fails (torch.export's partial graph), written out only when the call succeeds."""

import contextlib
import io
import logging
import sys


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
