"""The kernel cache trusts only what it made (issue 51; docs/threat-model.md): a planted library,
a trojaned source or header and a planted system header never run; a cache directory or entry
that is a link, another user's or writable by others is refused; an empty or truncated library
is rebuilt with one warning; stale temporaries go and live ones stay.  The loads that matter run
in fresh processes (a process never loads a path twice: glibc hands back what it loaded)."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import stax
from stax.runtime import kernel_cache
from stax.runtime import build as runtime
from stax.errors import CacheError

_X = np.arange(96, dtype=np.float32).reshape(8, 12)


def _f(a):
    return (a * 3 + 1).sum(-1)


#: compiles this module's ``_f``, so that its kernels (whose comments name the ops' source lines)
#: are the same as an in-process compile's, and so is their library
_COMPILE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import numpy as np, stax
from {Path(__file__).stem} import _X, _f
f = stax.compile(_f, _X)
assert np.allclose(f(_X), _f(_X)), f(_X)
print(f.library_path)
"""

_PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) { FILE* f = fopen("%s", "w"); if (f) fclose(f); }
"""


def _run(cache: Path) -> subprocess.CompletedProcess:
    """Compile and check ``_COMPILE``'s function in a fresh process using ``cache``."""
    return subprocess.run([sys.executable, "-c", _COMPILE], env={**os.environ, "STAX_CACHE_DIR": str(cache)},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> tuple[Path, Path]:
    """A cache holding the runtime, the precompiled headers and the function's library (its path
    relative to the cache), built once for the module."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    done = _run(cache)
    assert done.returncode == 0, done.stderr
    return cache, Path(done.stdout.strip()).relative_to(cache)


@pytest.fixture
def cache(warm, tmp_path) -> tuple[Path, Path]:
    """A private copy of the warm cache and the function's library in it."""
    copy = tmp_path / "cache"
    shutil.copytree(warm[0], copy)
    return copy, copy / warm[1]


def _shared_object(tmp_path: Path, marker: Path) -> Path:
    """A library whose constructor writes ``marker`` when it is loaded."""
    source = tmp_path / "planted.c"
    source.write_text(_PLANTED % marker)
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(tmp_path / "planted.so")], check=True)
    return tmp_path / "planted.so"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rebuilt_once(done: subprocess.CompletedProcess, reason: str) -> None:
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("CacheWarning") == 1 and reason in done.stderr, done.stderr


@pytest.mark.parametrize("record", ["kept", "removed"])
def test_a_planted_library_never_runs_and_is_rebuilt(cache, tmp_path, record):
    root, library = cache
    marker = tmp_path / "marker"
    shutil.copy(_shared_object(tmp_path, marker), library)
    if record == "removed":
        kernel_cache.record_path(library).unlink()
    done = _run(root)
    _rebuilt_once(done, "does not match the SHA-256" if record == "kept" else "has no record of its build")
    assert not marker.exists(), "the planted library's constructor ran"
    assert _sha(library) == kernel_cache.record_path(library).read_text().strip()


def test_a_trojaned_source_in_the_cache_is_never_compiled(cache, tmp_path):
    """Older versions compiled ``<key>.cpp`` when they found it; a header beside it is not read either."""
    root, library = cache
    marker = tmp_path / "marker"
    key = library.stem
    library.unlink()
    (library.parent / f"{key}.cpp").write_text(_PLANTED % marker + "#error a source from the cache was compiled\n")
    (library.parent / "stax_py.h").write_text("#error a header beside the source was read\n")
    done = _run(root)
    assert done.returncode == 0 and "CacheWarning" not in done.stderr, done.stderr
    assert not marker.exists() and library.exists()


def _pch_directories(root: Path) -> list[Path]:
    return sorted(p for p in (root / "pch").iterdir() if p.is_dir())


def test_a_changed_header_in_the_precompiled_header_folder_is_rewritten(cache, tmp_path):
    root, library = cache
    marker = tmp_path / "marker"
    library.unlink()
    for directory in _pch_directories(root):
        header = directory / "stax_vec.h"
        header.write_text(header.read_text() + '\nstatic int planted = [] { return std::fopen("%s", "w") != 0; }();\n'
                          % marker)
        (directory / "cmath").write_text("#error a file in the cache stood in for a system header\n")
    done = _run(root)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("CacheWarning") >= 1 and "differs from the installed package's header" in done.stderr
    assert not marker.exists(), "the changed header was compiled into a kernel"
    packaged = (runtime.HEADER_DIR / "stax_vec.h").read_bytes()
    assert any((d / "stax_vec.h").read_bytes() == packaged for d in _pch_directories(root))


def test_a_changed_precompiled_header_is_rebuilt(cache):
    root, library = cache
    library.unlink()
    gch = [g for d in _pch_directories(root) for g in d.glob("*.gch")]
    assert gch
    for g in gch:
        g.write_bytes(g.read_bytes()[: g.stat().st_size // 2])
    done = _run(root)
    assert done.returncode == 0, done.stderr
    assert "does not match the SHA-256" in done.stderr and done.stderr.count("CacheWarning") == 1, done.stderr
    assert any(_sha(g) == kernel_cache.record_path(g).read_text().strip() for g in gch)


@pytest.mark.parametrize("size", ["empty", "half"])
def test_an_empty_or_truncated_library_is_rebuilt_with_one_warning(cache, monkeypatch, size):
    root, library = cache
    library.write_bytes(b"" if size == "empty" else library.read_bytes()[: library.stat().st_size // 2])
    monkeypatch.setenv("STAX_CACHE_DIR", str(root))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = stax.compile(_f, _X)
    said = [str(w.message) for w in caught if issubclass(w.category, kernel_cache.CacheWarning)]
    assert len(said) == 1 and ("is empty" if size == "empty" else "does not match") in said[0], said
    np.testing.assert_allclose(f(_X), _f(_X), rtol=1e-6)
    assert Path(f.library_path) == library and _sha(library) == kernel_cache.record_path(library).read_text().strip()


# --- directories and entries the cache refuses ------------------------------------------------------

def _refused(root: Path, monkeypatch, message: str) -> None:
    monkeypatch.setenv("STAX_CACHE_DIR", str(root))
    with pytest.raises(CacheError, match=message) as info:
        stax.compile(_f, _X)
    assert "\n" not in str(info.value)


def test_a_cache_writable_by_others_is_refused(cache, monkeypatch):
    root, library = cache
    root.chmod(0o777)
    _refused(root, monkeypatch, r"the kernel cache .* is writable by group and others \(mode 0777\).*chmod go-w")
    root.chmod(0o700)
    library.parent.chmod(0o775)
    _refused(root, monkeypatch, rf"{library.parent} is writable by group \(mode 0775\).*rm -r")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_cache_of_another_user_is_refused(cache, monkeypatch):
    root, library = cache
    os.chown(root, 65534, 65534)
    _refused(root, monkeypatch, "the kernel cache .* belongs to user id 65534, not to you")
    os.chown(root, 0, 0)
    os.chown(library, 65534, 65534)
    _refused(root, monkeypatch, f"the cached library {library} belongs to user id 65534")


def test_a_symbolic_link_is_refused(cache, monkeypatch, tmp_path):
    root, library = cache
    link = tmp_path / "link"
    link.symlink_to(root)
    _refused(link, monkeypatch, "the kernel cache .*link is a symbolic link.*point STAX_CACHE_DIR")
    moved = tmp_path / "elsewhere.so"
    library.rename(moved)
    library.symlink_to(moved)
    _refused(root, monkeypatch, f"the cached library {library} is a symbolic link")


def test_a_new_cache_is_made_private(tmp_path, monkeypatch):
    where = tmp_path / "new" / "cache"
    monkeypatch.setenv("STAX_CACHE_DIR", str(where))
    old = os.umask(0)
    try:
        assert kernel_cache.cache_root() == where
    finally:
        os.umask(old)
    assert where.stat().st_mode & 0o777 == 0o700


# --- temporaries -------------------------------------------------------------------------------------

def test_stale_temporaries_are_removed_and_live_ones_kept(cache, monkeypatch):
    """A miss in a directory removes the temporaries of builders that are gone (their process, or
    older than STALE_SECONDS when it cannot be asked) and keeps a live builder's."""
    root, library = cache
    library.unlink()
    host = socket.gethostname().split(".")[0]
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        names = {"dead": f"tmp-{host}.{gone.pid}.abc.tmp", "live": f"tmp-{host}.{alive.pid}.abc.tmp",
                 "old": "tmpk2j4h5g6.so.tmp", "young": "tmpq1w2e3r4.so.tmp", "other host": "tmp-elsewhere.1.abc.tmp"}
        for name in names.values():
            (library.parent / name).mkdir()
        hours_ago = time.time() - 2 * kernel_cache.STALE_SECONDS
        os.utime(library.parent / names["old"], (hours_ago, hours_ago))
        monkeypatch.setenv("STAX_CACHE_DIR", str(root))
        stax.compile(_f, _X)
        left = {kind for kind, name in names.items() if (library.parent / name).exists()}
        assert left == {"live", "young", "other host"}
    finally:
        alive.kill()
        alive.wait()
