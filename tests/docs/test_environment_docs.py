"""docs/environment.md lists every environment variable the code reads (found in the source,
not copied), and nothing the code no longer reads."""
import re
from tests.helpers import ROOT

READ = re.compile(r"""(?:environ\.get|environ\[|getenv)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
#: a stax variable named in Python source, read indirectly (a table of names, then environ.get(name))
NAMED = re.compile(r"""["'](STAX_[A-Z0-9_]+)["']""")
#: variables the code passes on to the processes it starts, without reading them itself
PASSED_ON = {"PYTHONPATH"}


def read_by_the_code() -> set[str]:
    names = set()
    for package in ("stax", "solvers", "instances", "experiments"):
        for path in (ROOT / package).rglob("*"):
            if path.suffix in (".py", ".cpp", ".h"):
                text = path.read_text()
                names |= set(READ.findall(text)) | (set(NAMED.findall(text)) if path.suffix == ".py" else set())
    return names - PASSED_ON


def documented() -> set[str]:
    rows = [line for line in (ROOT / "docs" / "environment.md").read_text().splitlines() if line.startswith("| `")]
    return {re.match(r"\| `(\w+)`", row).group(1) for row in rows}


def test_every_variable_the_code_reads_is_documented():
    found = read_by_the_code()
    assert {"STAX_ISA", "STAX_THREADS", "STAX_BLAS", "STAX_CACHE_DIR"} <= found  # the search finds them
    missing = found - documented()
    assert not missing, f"read by the code but not in docs/environment.md: {sorted(missing)}"


def test_every_documented_variable_is_read():
    stale = documented() - read_by_the_code()
    assert not stale, f"docs/environment.md lists variables the code does not read: {sorted(stale)}"
