"""The kernel cache (seed 8's on-disk cache of built libraries), trusting only what stax made.

The cache is ``STAX_CACHE_DIR`` or ``~/.cache/stax``, created 0700.  A directory or file of it
that is a symbolic link, belongs to another user or is writable by group or others is refused
(``CacheError``, one line saying how to fix it): whoever can write there could plant code that
the next compile loads.  Each library's SHA-256 is recorded when it is built (``<key>.sha256``)
and checked before it is loaded; a library that does not match its record (planted, truncated,
empty, or left without one) is rebuilt, with one ``CacheWarning``.  Temporary files carry their
builder's host and process id, so a builder removes those of dead builders (and any temporary
older than ``STALE_SECONDS``) but never a live one's.  docs/threat-model.md says what this
guarantees and what it does not.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import BinaryIO, Iterator

from stax.errors import CacheError

DIRECTORY_MODE = 0o700
#: a temporary whose builder cannot be asked (another host, or an older stax's name) is stale after this
STALE_SECONDS = 3600
_TEMP_NAME = re.compile(r"tmp-(?P<host>[^.]+)\.(?P<pid>\d+)\.")
_OLD_TEMP_NAME = re.compile(r"tmp[a-z0-9_]{8}$")  # tempfile's names, as older versions wrote them


class CacheWarning(UserWarning):
    """A cached library or header that did not match its record and was rebuilt."""


def cache_root() -> Path:
    """The cache directory, made 0700 if it is missing, and checked (``check_private``)."""
    path = Path(os.environ.get("STAX_CACHE_DIR") or Path.home() / ".cache" / "stax")
    return private_directory(path, "the kernel cache")


def private_directory(path: Path, what: str = "the kernel cache's directory") -> Path:
    """``path``, made 0700 when missing (its parents as the umask says), refused unless private."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = _made(path, what)
    except OSError as error:
        raise _cannot_make(path, what, error.strerror) from None
    check_private(path, what, info)
    if not stat.S_ISDIR(info.st_mode):
        raise _cannot_make(path, what, "File exists")
    return path


def _made(path: Path, what: str) -> os.stat_result:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, DIRECTORY_MODE)
        os.chmod(path, DIRECTORY_MODE)  # the umask may have taken bits off
    except FileExistsError:
        pass  # another process made it first: checked like any directory found
    except OSError as error:
        raise _cannot_make(path, what, error.strerror) from None
    return os.lstat(path)


def _cannot_make(path: Path, what: str, reason: str) -> CacheError:
    return CacheError(f"{what} {path} cannot be made ({reason}); point STAX_CACHE_DIR at a writable directory")


def check_private(path: Path, what: str, info: os.stat_result | None = None) -> os.stat_result:
    """``path``'s status (``lstat``, or ``info`` from an open file), after refusing a symbolic link,
    another user's entry and one writable by group or others."""
    info = info or os.lstat(path)
    fix = ("point STAX_CACHE_DIR at a directory of your own (or unset it for ~/.cache/stax)"
           if what == "the kernel cache" else f"remove it (rm -r {path}): stax rebuilds what it needs")
    if stat.S_ISLNK(info.st_mode):
        raise CacheError(f"{what} {path} is a symbolic link, and stax loads code only from what it made; {fix}")
    if info.st_uid != os.geteuid():
        raise CacheError(f"{what} {path} belongs to user id {info.st_uid}, not to you ({os.geteuid()}), who could "
                         f"plant code in it; {fix}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if info.st_mode & bit)
        raise CacheError(f"{what} {path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}), who could "
                         f"plant code in it; run chmod go-w {path} (stax makes it 0700), or {fix}")
    return info


def open_private_file(path: Path, what: str) -> BinaryIO | None:
    """The regular file ``path`` opened for reading (None when it is missing), checked as opened:
    no symbolic link is followed, and a FIFO or device is refused rather than read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:  # O_NOFOLLOW on a link (ELOOP), or no permission: say which
        check_private(path, what)
        raise CacheError(f"{what} {path} cannot be read ({error.strerror}); remove it (rm {path}): stax rebuilds "
                         "it") from None
    file = os.fdopen(fd, "rb")
    try:
        info = check_private(path, what, os.fstat(fd))
        if not stat.S_ISREG(info.st_mode):
            raise CacheError(f"{what} {path} is not a regular file; remove it (rm {path}): stax rebuilds it")
    except BaseException:
        file.close()
        raise
    return file


def read_private_file(path: Path, what: str) -> bytes | None:
    """The bytes of ``path`` (``open_private_file``), None when it is missing."""
    file = open_private_file(path, what)
    if file is None:
        return None
    with file:
        return file.read()


def file_digest(file: BinaryIO) -> str:
    return hashlib.file_digest(file, "sha256").hexdigest()


def record_path(library: Path) -> Path:
    return library.with_suffix(".sha256")


def mismatch(library: Path) -> str | None:
    """Why ``library`` may not be loaded as it is, None when it matches the SHA-256 recorded when
    stax built it (``record_build``); ``"missing"`` when there is no library."""
    file = open_private_file(library, "the cached library")
    if file is None:
        return "missing"
    with file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return "is empty (a build was killed)"
        recorded = read_private_file(record_path(library), "the cached library's record")
        if recorded is None:
            return "has no record of its build (not made by this stax)"
        if file_digest(file) != recorded.decode(errors="replace").strip():
            return f"does not match the SHA-256 recorded when it was built ({size} bytes)"
    return None


def checked_for_loading(library: Path) -> Path:
    """``library``, refused unless it matches its record: the check just before ``dlopen``."""
    reason = mismatch(library)
    if reason is not None:
        raise CacheError(f"the cached library {library} {reason}: it changed after it was built; remove it "
                         f"(rm {library}) and compile again")
    return library


def record_build(built: Path, library: Path) -> None:
    """Record the SHA-256 of ``built`` (a finished build) for ``library``, then move it into place:
    the record first, so no reader sees the new library with the old record."""
    with open(built, "rb") as file:
        atomic_write(record_path(library), (file_digest(file) + "\n").encode())
    os.replace(built, library)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (made 0600), released on leaving: builders of
    one output that is not byte for byte reproducible (a precompiled header) take turns, so its
    record is always the record of the file in place."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        check_private(path, "the kernel cache's lock", os.fstat(fd))
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def warn_rebuild(what: Path, reason: str) -> None:
    warnings.warn(f"the cached {what} {reason}; stax rebuilds it", CacheWarning, stacklevel=3)


# --- temporary files --------------------------------------------------------------------------

@functools.cache
def _host() -> str:
    return socket.gethostname().split(".")[0] or "host"


def temp_prefix() -> str:
    """The start of this process's temporaries' names: its host and process id."""
    return f"tmp-{_host()}.{os.getpid()}."


def temporary_directory(directory: Path) -> Path:
    """A private (0700) directory for one build, in ``directory``, named by its builder."""
    return Path(tempfile.mkdtemp(dir=directory, prefix=temp_prefix(), suffix=".tmp"))


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _builder_gone(name: str, age: float) -> bool:
    """Whether the temporary ``name`` (``age`` seconds old) belongs to no live builder: its process
    is gone from this host, or it is older than STALE_SECONDS (another host's, an older stax's)."""
    match = _TEMP_NAME.match(name)
    if match is None or match["host"] != _host():
        return age > STALE_SECONDS
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a live process of another user
        pass
    return age > STALE_SECONDS


def remove_stale_temporaries(directory: Path) -> list[str]:
    """Remove the temporaries in ``directory`` whose builders are gone; returns their names."""
    removed, now = [], time.time()
    for entry in os.scandir(directory):
        if not (entry.name.endswith(".tmp") or _OLD_TEMP_NAME.match(entry.name)):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            if not _builder_gone(entry.name, age):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
        except FileNotFoundError:  # its builder, or another cleaner, removed it first
            continue
    return removed
