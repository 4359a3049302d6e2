"""A sweep's tasks on a Dask cluster: connecting, refusing mismatched workers, losing workers.

    tasks = DaskTasks("tcp://10.0.0.5:8786")   # a StaxError within seconds if nobody answers

Any cluster Dask runs works: ``dask scheduler`` and ``dask worker ADDRESS`` (nannies or not),
``LocalCluster``, ``SSHCluster``, dask-jobqueue's ``SLURMCluster``.  A task whose worker dies
runs again on another (Dask's own rescheduling), and its result arrives once.  A worker whose
stax code or Python differs from this process's is refused before anything runs (and a worker
joining later refuses the cells it gets, :func:`.provenance.version_mismatch`).  When the scheduler
goes away, the rows already recorded stay, and the error says how to resume.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any, Callable, Iterator

from stax.errors import StaxError

from experiments.sweep.provenance import version_mismatch, versions

CONNECT_SECONDS = 3
PROBE_SECONDS = 2
START_SCHEDULER = ("start one with `dask scheduler` (it prints its address, tcp://HOST:8786) and workers "
                   "with `dask worker ADDRESS` (docs/cluster.md)")


class ClusterError(StaxError):
    """No usable Dask cluster at the address, or it went away during the sweep."""


def probe(address: str) -> None:
    """Fail fast, before anything heavy is imported: a ClusterError naming ``address`` unless it is
    a well-formed TCP address (``tcp://HOST:PORT``, ``tls://...`` or ``HOST:PORT``) where something
    accepts connections.  Other transports (``inproc://``, ``ucx://``) are left to Dask."""
    scheme, separator, rest = address.rpartition("://")
    if separator and scheme not in ("tcp", "tls"):
        return
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ClusterError(f"{address!r} is not a scheduler address (expected tcp://HOST:PORT); {START_SCHEDULER}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS).close()
    except OSError as error:
        raise ClusterError(f"no Dask scheduler answers at {address!r} ({error.strerror or error}); "
                           f"{START_SCHEDULER}") from None


def insecure(address: str) -> str | None:
    """The warning for a plain-TCP scheduler address that is not this machine's loopback (Dask
    without TLS authenticates no one, and the client unpickles what workers send), else None."""
    scheme, separator, rest = address.rpartition("://")
    if separator and scheme != "tcp":
        return None  # tls:// is authenticated; inproc:// is this process
    host = rest.rpartition(":")[0].strip("[]") or rest
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        resolved = {host}
    if resolved and all(_loopback(ip) for ip in resolved):
        return None
    return (f"warning: the Dask scheduler at {address!r} is reached over plain TCP beyond this machine: whoever can "
            "reach it can run code on its workers and on this client; use tls:// with distributed.Security "
            "(docs/cluster.md) or bind it to 127.0.0.1")


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False


def connect(address: str):
    """A Dask client of the scheduler at ``address`` whose workers run this process's versions."""
    probe(address)
    try:
        from dask.distributed import Client
    except ImportError:
        raise ClusterError("--scheduler needs Dask: pip install 'stax[dask]'") from None
    for name in ("distributed.client", "distributed.comm", "distributed.core"):  # our one line says it all
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        client = Client(address, timeout=CONNECT_SECONDS, set_as_default=False)
    except (OSError, ValueError, TypeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ClusterError(f"no Dask scheduler answers at {address!r} ({reason[:160]}); {START_SCHEDULER}") from None
    try:
        _refuse_mismatched_workers(client)
        from experiments.sweep.isolate import start_server
        client.run(start_server)
    except BaseException:
        client.close()
        raise
    return client


def _refuse_mismatched_workers(client) -> None:
    expected = versions()
    answers = client.run(version_mismatch, expected, on_error="return")  # an exception where stax is missing
    problems = {worker: why if isinstance(why, str) else f"it cannot run the sweep's code ({why!r}); the client "
                f"runs stax {expected['stax']} on Python {expected['python']}" for worker, why in answers.items() if why}
    if problems:
        worker, why = next(iter(problems.items()))
        raise ClusterError(f"refusing the cluster: worker {worker} ({len(problems)} of {len(client.nthreads())} "
                           f"differ): {why}")


class DaskTasks:
    """The sweep's tasks on a Dask cluster (the interface of :class:`.sweep.LocalTasks`)."""

    def __init__(self, address: str):
        from dask.distributed import as_completed
        self.address = address
        self.client = connect(address)
        self.futures = as_completed(loop=self.client.loop, raise_errors=False)
        self.tags: dict[str, Any] = {}

    def submit(self, tag: Any, fn: Callable, *args: Any, urgent: bool = False) -> None:
        future = self.client.submit(fn, *args, key=f"{type(tag).__name__}-{tag.key}", pure=False,
                                    priority=int(urgent))
        self.tags[future.key] = tag
        self.futures.add(future)

    def completed(self) -> Iterator[tuple[Any, Any, str | None]]:
        """(tag, value, None) of every finished task, or (tag, None, why) for one that killed its
        workers too often; a ClusterError if the scheduler is lost."""
        for future in self.futures:
            tag = self.tags.pop(future.key)
            if future.status == "finished":
                yield tag, future.result(), None
            elif future.status == "error":
                error = future.exception()
                yield tag, None, f"{type(error).__name__}: {error}"
            else:
                raise self._lost(f"a task was {future.status}")
        if self.client.status != "running":
            raise self._lost(f"the client is {self.client.status}")

    def _lost(self, sign: str) -> ClusterError:
        return ClusterError(f"lost the Dask scheduler at {self.address} ({sign}); the finished rows are kept: "
                            "restart the cluster and rerun the same command to resume")

    def close(self) -> None:
        try:
            self.client.close(timeout=CONNECT_SECONDS)
        except Exception:  # noqa: BLE001 - a lost scheduler cannot be told goodbye
            pass
