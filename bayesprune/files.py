"""Writing a file in a folder without ever writing through a symbolic link.

A run directory can be edited by anyone between two commands: a ``report.md``, ``loss.png`` or
``importance.csv`` made a link to a file elsewhere must not let ``bayesprune report`` overwrite that
file. Every file bayesprune writes is therefore written as a new temporary file in the same folder
(created exclusively, so it never is a link) and renamed into place with :func:`os.replace`, which
replaces a link instead of following it; a crash leaves the old file or the new one, never half of one.
"""
import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import BayesPruneError

_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextmanager
def replacing(path):
    """Yield a fresh temporary path beside ``path`` (same suffix, so writers that pick a format by
    it still do) to write; on success it replaces ``path`` (a link there is replaced, never followed),
    on failure it is removed."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise BayesPruneError(f"{path}: is a folder, where bayesprune writes a file; move it away")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=path.suffix, dir=path.parent)
    os.fchmod(handle, 0o666 & ~_UMASK)  # the mode ``open`` would have given it (mkstemp's is 0600)
    os.close(handle)
    temporary = Path(temporary)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through :func:`replacing`."""
    with replacing(path) as temporary:
        temporary.write_bytes(data)
    return Path(path)


def write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`replacing`."""
    return write_bytes(path, text.encode())


def open_lock(path):
    """Open (creating) the lock file ``path`` for ``fcntl.flock`` without following a link: a link
    planted there is refused in one line, the file it points to untouched."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP or Path(path).is_symlink():
            raise BayesPruneError(f"{path}: the lock file is a symbolic link; remove it") from None
        raise BayesPruneError(f"{path}: cannot open the lock file ({error.strerror})") from None
    return os.fdopen(descriptor, "r+")
