"""A Ray address is checked before anything is written: ``compare`` / ``sweep --engine ray --address``
where nothing answers, where a server answers that is not Ray's head (a web server, an HTTP/2 server
that answers every call with 404 as a proxy does, one that never answers a call), or where Ray cannot
start (``auto`` with no cluster running) ends in one line naming ``--address`` (or ``RAY_ADDRESS``),
exit 2, within seconds, without Ray's own warnings, and with nothing written: no ``--out`` folder, no
``comparison.toml``. A real Ray head is accepted (test_compare_ray.py's comparison goes through its
address)."""

import socket
import threading
import time

import pytest

from bayesprune.cli import main

pytestmark = pytest.mark.usefixtures("cells_in_this_process")

#: HTTP/2 frames: an empty SETTINGS frame and its acknowledgement (RFC 9113, section 6.5).
SETTINGS, SETTINGS_ACK = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]), bytes([0, 0, 0, 4, 1, 0, 0, 0, 0])


def _read(connection, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _frames(connection):
    """``(type, flags, stream)`` of each HTTP/2 frame the client sends, after its 24-byte preface."""
    _read(connection, 24)
    while True:
        header = _read(connection, 9)
        _read(connection, int.from_bytes(header[:3], "big"))
        yield header[3], header[4], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF


def _serve(answer):
    """A server on 127.0.0.1 calling ``answer(connection)`` for each connection; yields ``host:port``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def accept():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_closing(answer), args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, f"127.0.0.1:{server.getsockname()[1]}"


def _closing(answer):
    def run(connection):
        with connection:
            try:
                answer(connection)
            except OSError:
                pass

    return run


def _web(connection):
    connection.recv(1024)
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def _http2(status_404: bool):
    """An HTTP/2 server (what the HTTP/2 check alone took for a gRPC server): every call answered with
    ``:status 404`` (HPACK's static entry 13), or never answered."""

    def answer(connection):
        connection.sendall(SETTINGS)
        for kind, flags, stream in _frames(connection):
            if kind == 4 and not flags & 1:
                connection.sendall(SETTINGS_ACK)
            elif kind == 1 and status_404:  # HEADERS: END_STREAM | END_HEADERS, ":status: 404"
                connection.sendall(bytes([0, 0, 1, 1, 5]) + stream.to_bytes(4, "big") + b"\x8d")

    return answer


def _silent(connection):
    connection.recv(1024)
    time.sleep(30)


SERVERS = {
    "a web server": _web,
    "an HTTP/2 server answering 404": _http2(True),
    "an HTTP/2 server that never answers a call": _http2(False),
    "a server that says nothing": _silent,
}


@pytest.fixture(params=list(SERVERS))
def not_ray(request, monkeypatch):
    from bayesprune.pipeline.compare import ray_head

    monkeypatch.setattr(ray_head, "PROBE_SECONDS", 2)  # the servers that never answer are waited for this long
    server, address = _serve(SERVERS[request.param])
    yield address
    server.close()


def _refused(argv, tmp_path, capfd, named, seconds=15):
    start = time.perf_counter()
    status = main(argv)
    elapsed = time.perf_counter() - start
    err = capfd.readouterr().err  # file descriptor 2 too: Ray's own (C++) warnings would be there
    assert status == 2 and err.startswith("bayesprune: error: ") and err.count("\n") == 1 and named in err, err
    assert elapsed < seconds, elapsed
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ray"], list(tmp_path.iterdir())  # no --out


@pytest.fixture
def no_ray_here(tmp_path, monkeypatch):
    """No Ray cluster reachable through this machine's temporary folder (``auto`` finds none)."""
    pytest.importorskip("ray")
    (tmp_path / "ray").mkdir()
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


COMMANDS = {
    "compare": ["compare", "--methods", "sbnn", "--sparsities", "0.5"],
    "sweep": ["sweep", "default", "--grid", "optim.lr=0.01"],
}


def test_an_address_where_no_ray_head_answers_is_one_line_and_writes_nothing(not_ray, no_ray_here, tmp_path, capfd):
    argv = [*COMMANDS["compare"], "--out", str(tmp_path / "new"), "--engine", "ray", "--address", not_ray]
    _refused(argv, tmp_path, capfd, f"--address {not_ray}: ")


def test_ray_address_is_checked_as_address_is(no_ray_here, tmp_path, capfd, monkeypatch):
    """The sweep, its address from RAY_ADDRESS, at an HTTP/2 server answering 404 (as this machine's proxy
    answers for any outside address)."""
    server, address = _serve(_http2(True))
    monkeypatch.setenv("RAY_ADDRESS", address)
    try:
        argv = [*COMMANDS["sweep"], "--out", str(tmp_path / "new"), "--engine", "ray"]
        _refused(argv, tmp_path, capfd, f"RAY_ADDRESS {address}: what answers there is not a Ray cluster's head")
    finally:
        server.close()


def test_a_refused_port_is_one_line_at_once(no_ray_here, tmp_path, capfd):
    argv = [*COMMANDS["compare"], "--out", str(tmp_path / "new"), "--engine", "ray", "--address", "127.0.0.1:9"]
    _refused(argv, tmp_path, capfd, "--address 127.0.0.1:9: no Ray cluster answers", seconds=5)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_ray_that_cannot_start_leaves_nothing_written(command, no_ray_here, tmp_path, capfd):
    """``--address auto`` with no cluster running: Ray's own start fails (no address to check before it);
    it is started before anything is written, so the folder is never made (it held comparison.toml)."""
    argv = [*COMMANDS[command], "--out", str(tmp_path / "new"), "--engine", "ray", "--address", "auto"]
    _refused(argv, tmp_path, capfd, "--address auto: ")
