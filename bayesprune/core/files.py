"""Writing a file in a folder without ever writing through a symbolic link.

A run directory can be edited by anyone between two commands: a ``report.md``, ``loss.png`` or
``importance.csv`` made a link to a file elsewhere must not let ``bayesprune report`` overwrite that
file. Every file bayesprune writes is therefore written as a new temporary file in the same folder
(created exclusively, so it never is a link) and renamed into place with :func:`os.replace`, which
replaces a link instead of following it; a crash leaves the old file or the new one, never half of one.

Reading, :func:`read_npz` trusts no header of an .npz archive it has not checked against the archive,
and :func:`check_plain_tree` refuses a folder of inputs that holds a link or anything but regular files.
"""

import errno
import hashlib
import math
import os
import shutil
import stat
import struct
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bayesprune.core.errors import BayesPruneError, DataError
from bayesprune.core.validation import MAX_ELEMENTS

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


def arrays_digest(arrays: dict) -> str:
    """A SHA-256 of named arrays (names, dtypes, shapes and values, in name order), in hexadecimal: equal
    for equal contents, whenever and however the archive holding them was written."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{value.dtype.str}\0{value.shape}\0".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _npy_header(name: str, handle) -> tuple:
    """``(shape, fortran_order, dtype)`` of the .npy member ``name`` whose file ``handle`` is at its start."""
    version = np.lib.format.read_magic(handle)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"array {name!r}: .npy format version {version} is not one numpy.savez writes")
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read_header(handle)


def _mapped(path, name: str, info: zipfile.ZipInfo) -> np.memmap:
    """The array of the stored (uncompressed) member ``info`` as a read-only memory map of ``path``."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(
            f"array {name!r} is compressed (numpy.savez_compressed); a memory map needs it stored (numpy.savez)"
        )
    with open(path, "rb") as handle:
        handle.seek(info.header_offset + 26)  # the local header's name and extra-field lengths
        name_length, extra_length = struct.unpack("<HH", handle.read(4))
        handle.seek(info.header_offset + 30 + name_length + extra_length)
        shape, fortran, dtype = _npy_header(name, handle)
        offset = handle.tell()
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def read_npz(path, *, mapped=()) -> dict:
    """Name → array of every array of the .npz archive (``numpy.savez``) at ``path``, never unpickled;
    the arrays named in ``mapped`` are read-only memory maps of the file instead (read when indexed).

    Each member's header is read and checked before its array is allocated: an object array, a shape
    of more than :data:`~bayesprune.core.validation.MAX_ELEMENTS` values or more bytes than the member holds
    (a tampered header declaring 10**12 images), or a compressed member to map, raises ``ValueError``
    naming the array; an unreadable archive raises ``OSError``, ``EOFError`` or ``zipfile.BadZipFile``.
    """
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            with archive.open(info) as member:
                shape, _, dtype = _npy_header(name, member)
            values = math.prod(shape)
            if dtype.hasobject:
                raise ValueError(f"array {name!r} is an object array; files are never unpickled")
            if (values > MAX_ELEMENTS and name not in mapped) or values * dtype.itemsize > info.file_size:
                raise ValueError(
                    f"array {name!r} declares shape {shape} of {dtype}, more than its {info.file_size:,} bytes hold"
                )
            if name in mapped:
                arrays[name] = _mapped(path, name, info)
                continue
            with archive.open(info) as member:
                arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
    return arrays


def check_plain_tree(folder):
    """Refuse, naming it, a symbolic link or anything but a folder or a regular file in ``folder`` (itself
    included), which is read as it lies: a link may lead out of it or back into it (a loop repeats its
    files under other names), and a FIFO or a device named ``x.png`` blocks a read forever."""
    for parent, folders, files in os.walk(folder):  # os.walk descends into no link
        for path in [parent] * (parent == str(folder)) + [os.path.join(parent, name) for name in folders + files]:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise DataError(
                    f"{path}: is a symbolic link; an input folder is read without following links (copy "
                    "what it points to in its place)"
                )
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise DataError(
                    f"{path}: not a regular file (a FIFO, socket or device); an input folder holds files only"
                )


@contextmanager
def all_or_nothing(folder):
    """Keep what the block writes into ``folder`` (through :func:`replacing`) only if it completes: if
    it raises, every file it created there is removed and every file or link it replaced is put back as
    it was, so a refused command leaves the folder unchanged.

    The files of ``folder`` are hard-linked aside first (no copy: a file renamed over keeps its bytes
    in the link), in a hidden folder of its own removed on exit."""
    folder = Path(folder)
    aside = Path(tempfile.mkdtemp(prefix=".before.", dir=folder))
    links, files = {}, set()
    for path in folder.iterdir():
        if path.is_symlink():
            links[path.name] = os.readlink(path)
        elif path.is_file():
            os.link(path, aside / path.name)
            files.add(path.name)
    try:
        yield
    except BaseException:
        for path in folder.iterdir():
            if path != aside and (path.is_symlink() or path.is_file()) and path.name not in files | set(links):
                path.unlink()
        for name in files:
            os.replace(aside / name, folder / name)
        for name, target in links.items():
            if not (folder / name).is_symlink() or os.readlink(folder / name) != target:
                (folder / name).unlink(missing_ok=True)
                os.symlink(target, folder / name)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
