"""A Ray cluster for the ``ray`` engine, reached before anything of a grid is written.

:func:`check_address` asks the head at ``--address`` (or ``RAY_ADDRESS``) with Ray's own GCS client, as
``ray.init`` does, but with a deadline of :data:`PROBE_SECONDS` and without Ray's warnings (``ray.init``
retries for minutes, printing a warning per try). A port where nothing listens is refused by the
socket at once; a server that is not a Ray head, even one that speaks HTTP/2 as gRPC does (a web
proxy answering every call with 404), fails the GCS call. :func:`started` then starts Ray (or connects
to that cluster) for the block: where that fails, it fails before the grid's folder is made.
"""

import logging
import os
import signal
import socket
import sys
from contextlib import contextmanager

from bayesprune.core.errors import BayesPruneError

#: Seconds a Ray address is given to answer each question (its socket, its GCS call).
PROBE_SECONDS = 5
#: HTTP/2's connection preface and an empty SETTINGS frame: what a gRPC server, as Ray's head is, answers.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: Addresses Ray resolves itself (a cluster started on this machine, or a new local one): nothing to ask.
LOCAL = (None, "", "auto", "local")


def named(address) -> str:
    """How the Ray address is named to the user: ``--address X``, ``RAY_ADDRESS X``, or a local Ray."""
    if address is not None:
        return f"--address {address}"
    if os.environ.get("RAY_ADDRESS"):
        return f"RAY_ADDRESS {os.environ['RAY_ADDRESS']}"
    return "--engine ray (a Ray started here)"


def check_address(address):
    """Refuse, within seconds, a Ray address (``address``, else ``RAY_ADDRESS``) where no Ray head answers:
    one line naming where it came from. A ``ray://`` address (Ray Client, not the head's GCS port) is
    only asked for an HTTP/2 answer."""
    target = address if address is not None else os.environ.get("RAY_ADDRESS")
    if target in LOCAL:
        return
    scheme, _, host_port = target.rpartition("://")
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=PROBE_SECONDS) as connection:
            connection.settimeout(PROBE_SECONDS)
            connection.sendall(_HTTP2_HELLO)
            answer = connection.recv(9)
    except (OSError, ValueError):
        raise BayesPruneError(f"{named(address)}: no Ray cluster answers there (give host:port of its head)") from None
    if len(answer) < 4 or answer[3] != 4:
        raise BayesPruneError(f"{named(address)}: what answers there is not a Ray cluster's head (no gRPC server)")
    if scheme != "ray":
        _ask_gcs(f"{host or '127.0.0.1'}:{port}", address)


def _ask_gcs(host_port: str, address):
    """One call to the GCS at ``host_port`` with Ray's client (it asks for the cluster's id)."""
    from ray._raylet import InnerGcsClient

    with _stderr_closed():
        try:
            InnerGcsClient.standalone(host_port, None, PROBE_SECONDS * 1000)
        except Exception as error:  # noqa: BLE001 - Ray raises RpcError, RaySystemError, ValueError, … here
            reason = " ".join(str(error).split())[:120]
            raise BayesPruneError(
                f"{named(address)}: what answers there is not a Ray cluster's head ({reason})"
            ) from None


@contextmanager
def _stderr_closed():
    """File descriptor 2 sent to /dev/null for the block: Ray's C++ client logs every failed call there,
    which the one-line refusal replaces."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextmanager
def started(address):
    """Ray started for the block (``ray.init`` at ``address``; a local Ray where none is given), shut down
    after it; nothing done where Ray is started already (by the caller, or an outer block). A Ray that
    does not start is one line naming the address. Ray's notices below errors (its token authentication
    warning, "Started a local Ray instance") are kept off the terminal. SIGINT and SIGTERM keep their
    handlers (Ray puts its own in, which end the driver without stopping its tasks)."""
    import ray

    if ray.is_initialized():
        yield
        return
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        )
    except Exception as error:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, … here
        message = " ".join(str(error).split())[:200]
        raise BayesPruneError(f"{named(address)}: Ray did not start ({type(error).__name__}: {message})") from None
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    try:
        yield
    finally:
        ray.shutdown()
