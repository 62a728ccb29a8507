"""A process's exit without the interpreter's last garbage collections.

At exit, after its ``atexit`` handlers, CPython clears every module and runs full garbage collections over
every object still alive: with torch, Pyro and Torch-Pruning imported, half a million objects of four
thousand modules, seconds of every command's and every comparison worker's exit (2-8 s each on a busy
2-core machine; a comparison waits for its workers' before it reads their cells). Nothing of a run
depends on that collection: files are written and closed before a command returns, ``atexit`` handlers
(logging's flush, ``weakref.finalize`` callbacks) still run, and objects still freed by their reference
count are finalized as ever; only cycles left at exit are not collected, which the operating system frees
with the process.
"""

import atexit
import gc


def exit_without_collection():
    """Move every object to the collector's permanent generation once the ``atexit`` handlers run
    (:func:`gc.freeze`), so that the interpreter's collections at exit have nothing to walk; registered
    once however often it is called."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
