"""A self-contained HTML report of a sweep, read like a paper's figures: the sweep's name, a
headline that leads with the finding (each heuristic's gap to the optimum, and the families
where the strategies differ most), its table, the figures with a caption each, per-family
tables, failures, and provenance at the end.

Its words are ``experiments.report.summary``'s: a *cell* is one run of the sweep, a *problem* what a
strategy solves (gaps and "at optimum" count problems)."""
from __future__ import annotations

import base64
import html
import math
import tomllib
from pathlib import Path

import pandas as pd

from experiments.report.plots import BASELINES, CAPTIONS, REFERENCE, base, colour, compared, plot_all
from experiments.report.rank_correlation import per_family
from experiments.report.summary import KINDS, strategy_summary

STYLE = ("body{font-family:sans-serif;max-width:1040px;margin:2em auto;color:#222;line-height:1.4}"
         "table{border-collapse:collapse;font-size:14px;margin:0.5em 0 1.5em}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
         "td:first-child,th:first-child{text-align:left}"
         "figure{margin:1.5em 0}figure img{width:100%;border:1px solid #eee}"
         "figcaption{font-size:14px;color:#444;margin-top:0.3em}.headline{font-size:17px}"
         ".swatch{display:inline-block;width:0.8em;height:0.8em;margin-right:0.4em;border-radius:2px}")


def sweep_name(results: str | Path) -> str:
    """The name of the sweep whose results are at ``results``: its config's (``config.toml``
    beside the table), else the folder's."""
    folder = Path(results) if Path(results).is_dir() else Path(results).parent
    try:
        return str(tomllib.loads((folder / "config.toml").read_text()).get("name", folder.resolve().name))
    except (OSError, tomllib.TOMLDecodeError):
        return folder.resolve().name


def _percent(x: float) -> str:
    return "" if pd.isna(x) else f"{x:+.2%}"


def _seconds(x: float) -> str:
    return "" if pd.isna(x) else f"{x:.2f}"


VALUES = {strategy: value for strategy, value, _ in KINDS}
#: how the problems of each kind are named in the headline
PROBLEMS = {"fusion": "instances", "order": "order problems"}


def _name(name: str) -> str:
    return f"<b>{html.escape(name)}</b>"


def _gap_words(r: pd.Series) -> str:
    return (f"{_name(r['name'])} {_percent(r['geo-mean gap'])} (worst {_percent(r['worst gap'])}; "
            f"optimal on {r['at optimum']} of {r['compared']})")


def _where_they_differ(table: pd.DataFrame, strategy: str, names: list[str], count: int = 2) -> str:
    """The families where the heuristics' geometric-mean gaps are furthest apart (with one
    heuristic: where it is furthest from the best known)."""
    gaps = family_gaps(table, strategy, VALUES[strategy])
    if gaps.empty:
        return ""
    gaps = gaps[gaps[strategy].isin(names)].pivot(index="family", columns=strategy, values="gap")[names]
    spread = (gaps.max(axis=1) - gaps.min(axis=1)) if len(names) > 1 else gaps[names[0]]
    top = spread[spread > 0.0005].sort_values(ascending=False).head(count).index
    if not len(top):
        return ""

    def family(f: str) -> str:
        if len(names) == 1:
            return f"{html.escape(f)} ({_percent(gaps.loc[f, names[0]])})"
        inner = ", ".join(f"{html.escape(n)} {_percent(gaps.loc[f, n])}" for n in names if pd.notna(gaps.loc[f, n]))
        return f"{html.escape(f)} ({inner})"
    lead = "They differ most on " if len(names) > 1 else f"{_name(names[0])} is furthest from the best known on "
    return lead + " and ".join(family(f) for f in top) + "."


def headline(summary: pd.DataFrame, table: pd.DataFrame) -> str:
    """One paragraph per kind of problem, leading with the finding: each heuristic's gap to the
    best known value (geometric mean, worst, how often optimal), the baseline's, the families
    where the heuristics differ most; then the reference solver's own record, last since it is
    at the optimum by construction unless it ran out of time."""
    paragraphs = []
    for kind, group in summary[summary["compared"] > 0].groupby("kind", sort=False):
        group = group.sort_values("geo-mean gap")
        baseline = group[group["name"] == BASELINES.get(kind)]
        reference = group[group["name"] == REFERENCE]
        heuristics = group[~group.index.isin(baseline.index.union(reference.index))]
        parts = [f"<b>{kind.capitalize()}</b>, {VALUES[kind]} above the best known in geometric mean, over "
                 f"{group['compared'].max()} {PROBLEMS[kind]}: "
                 + "; ".join([*(_gap_words(r) for _, r in heuristics.iterrows()),
                              *(f"{_name(r['name'])}, the baseline, {_percent(r['geo-mean gap'])}"
                                for _, r in baseline.iterrows())]) + "."]
        names = list(heuristics["name"])
        if names:
            parts.append(_where_they_differ(table, kind, names))
        for _, r in reference.iterrows():
            parts.append(f"{_name(r['name'])}, the reference's own solver, is optimal on {r['at optimum']} of "
                         f"{r['compared']}" + (" by construction." if r["at optimum"] == r["compared"] else
                                               f" (its worst {_percent(r['worst gap'])}: time limits)."))
        paragraphs.append("<p class='headline'>" + " ".join(p for p in parts if p) + "</p>")
    return "".join(paragraphs)


def _headline_table(summary: pd.DataFrame) -> str:
    rows = "".join(
        f"<tr><td><span class='swatch' style='background:{colour(r['name'])}'></span>{html.escape(r['kind'])} "
        f"{html.escape(r['name'])}</td><td>{_percent(r['geo-mean gap'])}</td><td>{_percent(r['worst gap'])}</td>"
        f"<td>{r['at optimum']} of {r['compared']}</td><td>{r['cells']}</td><td>{r['failed']}</td>"
        f"<td>{_seconds(r['solve s'])}</td></tr>"
        for _, r in summary.iterrows())
    return ("<table><tr><th>strategy</th><th>geo-mean gap</th><th>worst gap</th><th>problems at optimum</th>"
            f"<th>cells</th><th>failed</th><th>solve s</th></tr>{rows}</table>"
            "<p>A cell is one run of the sweep (an instance, a fusion strategy, an order strategy); a problem is "
            "what a strategy solves: for fusion an instance, for orders an instance's kernels under one fusion "
            "strategy. Gaps: value / best known - 1 (the reference's, or a strategy's where lower), per problem "
            "with a positive best known value (geometric mean and worst). Problems at optimum: those whose value "
            "equals a reference proven optimal, of the problems compared. Cells: the cells the strategy ran in; "
            "failed: those that failed or timed out. Solve s: the strategy's total solve time.</p>")


def family_gaps(table: pd.DataFrame, strategy: str, value: str) -> pd.DataFrame:
    """Per family (programs as one) and strategy: problems at a proven optimum (``at``), problems
    compared (``n``) and the geometric-mean gap to the best known (``gap``)."""
    rows = compared(table, value, strategy)
    if rows.empty:
        return pd.DataFrame()
    ref, best = rows[f"{value}_ref"], rows[base(rows, value)]
    rows = rows.assign(family=rows["family"].where(rows["kind"] != "program", "programs"),
                       at=(rows[value] == ref) & (rows[f"{value}_ref_status"] == "optimal"),
                       log=(rows[value] / best.where(best > 0)).astype(float).map(math.log))
    gaps = rows.groupby(["family", strategy]).agg(at=("at", "sum"), n=("at", "size"), log=("log", "mean"))
    return gaps.assign(gap=gaps["log"].map(math.exp) - 1).drop(columns="log").reset_index()


def _family_table(table: pd.DataFrame, strategy: str, value: str) -> pd.DataFrame:
    """Per family, per strategy: problems at optimum of those compared, and the geometric-mean gap."""
    gaps = family_gaps(table, strategy, value)
    if gaps.empty:
        return gaps
    text = gaps.set_index(["family", strategy]).apply(
        lambda r: f"{int(r['at'])} of {int(r['n'])}, {_percent(r['gap'])}", axis=1)
    return text.unstack(strategy).fillna("").reset_index()


def _time_tau_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per family, how well modeled traffic ranks the strategies' measured times."""
    families = per_family(table)
    if families.empty:
        return families
    return pd.DataFrame({"family": families["family"], "instances": families["instances"],
                         "mean tau": families["mean_tau"].map(lambda t: f"{t:+.2f}"),
                         "median tau": families["median_tau"].map(lambda t: f"{t:+.2f}"),
                         "tau > 0": families["positive"].map(lambda t: f"{t:.0%}")})


TIME_TAU_NOTE = ("<p>Per family, over its timed instances: the Kendall rank correlation (tau-b) between each "
                 "strategy's modeled traffic (Definition 7.3) and its measured median time per call, across the "
                 "strategies that ran the instance; the mean and median of the instances' tau, and the share of "
                 "instances where it is positive (a lower modeled traffic ranks with a faster kernel). An instance "
                 "whose strategies all have the same traffic or the same time has no tau and is left out.</p>")


def _failures(table: pd.DataFrame) -> pd.DataFrame:
    bad = table[table["status"] != "ok"]
    return pd.DataFrame({"instance": bad["instance"], "fusion": bad["fusion"], "order": bad["order"],
                         "status": bad["status"],
                         "error": bad["error"].fillna("").map(lambda e: e.strip().splitlines()[-1][:160] if e else "")})


def _section(title: str, frame: pd.DataFrame, note: str = "") -> str:
    if frame.empty:
        return ""
    return f"<h2>{html.escape(title)}</h2>{note}{frame.to_html(index=False, na_rep='', border=0)}"


def _provenance(table: pd.DataFrame) -> str:
    if not len(table):
        return "<p>No cells.</p>"
    first = table.iloc[0]

    def field(name: str) -> str:
        value = first.get(name)
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) else html.escape(str(value))

    status = table["status"].value_counts().to_dict()
    return (f"<h2>Provenance</h2><p>{len(table)} cells: {', '.join(f'{v} {k}' for k, v in status.items())}. "
            f"Code {field('code_version')}, git {field('git_commit')[:12]}{' (dirty)' if first.get('git_dirty') else ''}; "
            f"host {field('machine')} ({field('cpu')}, {field('cpu_count')} cores, ISA {field('isa')}, "
            f"{field('gcc_version')}); reference time limit {field('reference_time_limit')} s, cell limit "
            f"{field('cell_timeout')} s, timing {field('timing_repeat')} repeats on {field('timing_threads')} "
            f"threads; stax {field('stax_version')}, OR-Tools {field('ortools_version')}, numpy "
            f"{field('numpy_version')}; dates {table['date'].min()} to {table['date'].max()}. The config is "
            "config.toml beside this page.</p>")


def write_report(table: pd.DataFrame, out: str | Path, title: str = "Stax sweep") -> Path:
    """Draw the figures into ``out`` and write ``out/report.html`` (figures embedded); return its path."""
    out = Path(out)
    figures = plot_all(table, out)
    summary = strategy_summary(table) if len(table) else pd.DataFrame()
    images = "".join(
        f"<figure><img alt='{p.stem}' src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'>"
        f"<figcaption><b>{p.stem.replace('_', ' ').capitalize()}.</b> {html.escape(CAPTIONS[p.stem])}</figcaption>"
        "</figure>" for p in figures)
    families = "".join(_section(f"{strategy.capitalize()} strategies by family: problems at optimum, "
                                "geometric-mean gap",
                                _family_table(table, strategy, value)) for strategy, value, _ in KINDS)
    body = "".join([
        f"<h1>{html.escape(title)}</h1>",
        headline(summary, table) if len(summary) else "<p>No finished cell to compare.</p>",
        _headline_table(summary) if len(summary) else "",
        images, families,
        _section("Does a lower modeled traffic make faster kernels? Kendall tau by family", _time_tau_table(table),
                 TIME_TAU_NOTE),
        _section("Failed or timed-out cells", _failures(table)),
        _provenance(table),
    ])
    path = out / "report.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    f"<style>{STYLE}</style></head><body>{body}</body></html>")
    return path
