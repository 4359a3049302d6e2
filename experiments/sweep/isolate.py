"""Run a function in a child process with a hard time limit, from any thread of any process.

Children are forked by a small server (``python -m experiments.sweep.isolate``) that this process
starts once with ``subprocess`` and that has already imported the measuring code, so a child
starts in milliseconds.  Because the server is a plain subprocess and not a ``multiprocessing``
child, this works inside a Dask nanny's worker, which is a daemonic process and may not start
``multiprocessing`` children.

Each child leads its own session, so the time limit kills its whole process tree (compilers it
started included), and it kills that tree itself when the process that asked for it goes away
(its connection closes): a killed sweep or Dask worker leaves no cell running.  The server exits
when its parent does.  Outcomes: ``("ok", value)``, ``("error", traceback)``, ``("timeout",
message)`` when the limit ran out, ``("error", message)`` when the child died without a result.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

PRELOAD = "experiments.sweep.warm"
ROOT = Path(__file__).resolve().parents[2]
_HEADER = struct.Struct("!Q")


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _exactly(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes from ``sock``; TimeoutError after ``deadline`` (time.monotonic), EOFError if it closes."""
    chunks = []
    while n:
        if deadline is not None:
            sock.settimeout(max(deadline - time.monotonic(), 1e-6))
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket, deadline: float | None = None) -> bytes:
    return _exactly(sock, _HEADER.unpack(_exactly(sock, _HEADER.size, deadline))[0], deadline)


class _Server:
    """This process's fork server: started on first use, restarted if it died."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.path = ""

    def address(self) -> str:
        with self.lock:
            if self.process is None or self.process.poll() is not None:
                self._start()
            return self.path

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="stax-cells-")
        self.path = os.path.join(folder, "server.sock")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "experiments.sweep.isolate", self.path, str(os.getpid())],
                                        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        ready = self.process.stdout.readline()
        self.process.stdout.close()
        if ready.strip() != b"ready":
            raise RuntimeError(f"the cell process server did not start (exit code {self.process.wait()})")


_server = _Server()


def start_server() -> None:
    """Start this process's fork server in the background (a Dask worker's, while the sweep is
    planned); cells that arrive meanwhile wait for it."""
    threading.Thread(target=_server.address, daemon=True).start()


def call_with_limit(fn: Callable, args: tuple, seconds: float) -> tuple[str, Any]:
    """``fn(*args)`` in a child process whose tree is killed after ``seconds``; returns
    (status, value or message)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(_server.address())
        deadline = time.monotonic() + seconds  # from the request on, however late this thread reads
        _send(sock, pickle.dumps((fn, args)))
        try:
            pid = struct.unpack("!i", _exactly(sock, 4))[0]
            return pickle.loads(_receive(sock, deadline))
        except TimeoutError:
            _kill_group(pid)
            return "timeout", f"the cell ran longer than its limit of {seconds:g} s; its process was killed"
        except EOFError:
            return "error", "the cell's process died without a result"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child(connection: socket.socket) -> None:
    """In a forked child: run the request on ``connection``; die with the asker."""
    os.setsid()
    for number in (signal.SIGCHLD, signal.SIGINT):  # the server's dispositions, not a cell's
        signal.signal(number, signal.SIG_DFL)
    connection.sendall(struct.pack("!i", os.getpid()))
    fn, args = pickle.loads(_receive(connection))

    def watch() -> None:  # the asker closes the connection only when it gives up or dies
        try:
            connection.recv(1)
        finally:
            os.killpg(0, signal.SIGKILL)
    threading.Thread(target=watch, daemon=True).start()
    try:
        outcome = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001 - everything goes back to the asker as text
        outcome = ("error", traceback.format_exc())
    try:
        payload = pickle.dumps(outcome)
    except Exception:  # noqa: BLE001 - an unpicklable value
        payload = pickle.dumps(("error", traceback.format_exc()))
    _send(connection, payload)


def serve(path: str, parent: int) -> None:
    """Accept requests on the Unix socket ``path`` and fork a child for each, until ``parent`` exits."""
    __import__(PRELOAD)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupted sweep stops through its connections
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(0.5)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # what cells print goes where the asker's errors go
    try:
        while os.getppid() == parent:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                child = os.fork()
            except OSError:  # no process to spare now: the asker sees a closed connection
                connection.close()
                continue
            if child == 0:
                listener.close()
                code = 0
                try:
                    _child(connection)
                except BaseException:  # noqa: BLE001 - the asker sees a closed connection
                    code = 1
                os._exit(code)
            connection.close()
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)
        os.rmdir(os.path.dirname(path))


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
