"""Reading a run's files: any failure to read one becomes one line naming the file (the report and
``bayesprune importance`` read through it)."""

import csv
import zipfile
from contextlib import contextmanager
from pathlib import Path

from bayesprune.core.errors import BayesPruneError


@contextmanager
def reading(path: Path):
    """Turn any failure to read ``path`` into one line naming the file."""
    try:
        yield
    except BayesPruneError:
        raise
    except (
        OSError,
        EOFError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        RecursionError,
        zipfile.BadZipFile,
        csv.Error,
    ) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise BayesPruneError(f"{path}: not readable as bayesprune wrote it ({reason})") from None
