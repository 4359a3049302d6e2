"""docs/spec.md states every definition, algorithm, proposition, lemma and theorem the code cites,
numbered as cited, each naming modules that exist; the README links it."""
import re
from pathlib import Path
from tests.helpers import ROOT

KINDS = r"(Definition|Algorithm|Proposition|Theorem|Lemma|Corollary)"
CITATION = re.compile(KINDS + r" (\d+\.\d+)")
ENTRY = re.compile(r"^### " + KINDS + r" (\d+\.\d+)\b(.*)$", re.M)
SOURCES = ("stax", "solvers", "instances", "experiments", "tests")


def cited() -> dict[tuple[str, str], str]:
    """Every citation in the code and the README, with one place it occurs."""
    found = {}
    paths = [p for package in SOURCES for p in (ROOT / package).rglob("*")
             if p.suffix in (".py", ".h", ".cpp", ".md", ".toml") and p.name != Path(__file__).name]
    for path in [*paths, ROOT / "README.md"]:
        for kind, number in CITATION.findall(path.read_text()):
            found.setdefault((kind, number), str(path.relative_to(ROOT)))
    return found


def entries() -> dict[tuple[str, str], str]:
    """The entries of docs/spec.md: (kind, number) -> the entry's text."""
    text = (ROOT / "docs" / "spec.md").read_text()
    heads = list(ENTRY.finditer(text))
    return {(m.group(1), m.group(2)): text[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            for i, m in enumerate(heads)}


def test_every_citation_has_an_entry():
    citations, documented = cited(), entries()
    assert len(citations) >= 15
    missing = {f"{k} {n}": where for (k, n), where in citations.items() if (k, n) not in documented}
    assert not missing, f"cited in the code but not in docs/spec.md: {missing}"


def test_every_entry_names_modules_that_exist():
    for (kind, number), text in entries().items():
        modules = re.findall(r"`((?:stax|solvers|instances|experiments)/[\w/]+\.(?:py|h|cpp))`", text)
        assert modules, f"{kind} {number} names no implementing module"
        for module in modules:
            assert (ROOT / module).exists(), f"{kind} {number}: {module} does not exist"


def test_readme_links_the_specification():
    assert "(docs/spec.md)" in (ROOT / "README.md").read_text()
