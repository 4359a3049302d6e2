"""A self-contained HTML report of a sweep, read like a paper's figures: the sweep's name, a
headline sentence and table (which strategy is closest to the reference, by how much), the
figures with a caption each, per-family tables, failures, and provenance at the end."""
from __future__ import annotations

import base64
import html
import math
import tomllib
from pathlib import Path

import pandas as pd

from .plots import CAPTIONS, base, colour, compared, plot_all
from .rank_correlation import per_family
from .summary import KINDS, strategy_summary

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


def headline(summary: pd.DataFrame) -> str:
    """One sentence per problem: the strategy most often at the optimum (ties: the smaller gap) and
    the heuristic closest behind when the first is an exact solver."""
    sentences = []
    for kind, group in summary[summary["compared"] > 0].groupby("kind", sort=False):
        ranked = group.assign(share=group["at optimum"] / group["compared"]).sort_values(
            ["share", "geo-mean gap"], ascending=[False, True])
        parts = [f"<b>{html.escape(r['name'])}</b> is at the optimum in {r['at optimum']} of {r['compared']} "
                 f"cells (geometric-mean gap {_percent(r['geo-mean gap'])}, worst {_percent(r['worst gap'])})"
                 for _, r in ranked.head(2).iterrows()]
        sentences.append(f"{kind.capitalize()}: " + "; then ".join(parts) + ".")
    return "<p class='headline'>" + "<br>".join(sentences) + "</p>" if sentences else ""


def _headline_table(summary: pd.DataFrame) -> str:
    rows = "".join(
        f"<tr><td><span class='swatch' style='background:{colour(r['name'])}'></span>{html.escape(r['kind'])} "
        f"{html.escape(r['name'])}</td><td>{r['cells']}</td><td>{r['failed']}</td>"
        f"<td>{r['at optimum']}/{r['compared']}</td><td>{_percent(r['geo-mean gap'])}</td>"
        f"<td>{_percent(r['worst gap'])}</td><td>{_seconds(r['solve s'])}</td></tr>"
        for _, r in summary.iterrows())
    return ("<table><tr><th>strategy</th><th>cells</th><th>failed</th><th>at optimum</th><th>geo-mean gap</th>"
            f"<th>worst gap</th><th>solve s</th></tr>{rows}</table>"
            "<p>At optimum: cells whose value equals a reference proven optimal, of the cells compared. Gaps: "
            "value / best known - 1 (the reference, or a strategy where lower) over cells with a positive best "
            "known value (geometric mean and worst). Solve s: "
            "the strategy's total solve time.</p>")


def _family_table(table: pd.DataFrame, strategy: str, value: str) -> pd.DataFrame:
    """Per family (programs as one), per strategy: at optimum / compared, and the geometric-mean gap."""
    rows = compared(table, value, strategy)
    if rows.empty:
        return pd.DataFrame()
    ref, best = rows[f"{value}_ref"], rows[base(rows, value)]
    rows = rows.assign(family=rows["family"].where(rows["kind"] != "program", "programs"),
                       at=(rows[value] == ref) & (rows[f"{value}_ref_status"] == "optimal"),
                       log=(rows[value] / best.where(best > 0)).astype(float).map(math.log))
    cells = rows.groupby(["family", strategy]).agg(at=("at", "sum"), n=("at", "size"), log=("log", "mean"))
    text = cells.apply(lambda r: f"{int(r['at'])}/{int(r['n'])}, {_percent(math.exp(r['log']) - 1)}", axis=1)
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
    families = "".join(_section(f"{strategy.capitalize()} strategies by family: at optimum, geometric-mean gap",
                                _family_table(table, strategy, value)) for strategy, value, _ in KINDS)
    body = "".join([
        f"<h1>{html.escape(title)}</h1>",
        headline(summary) if len(summary) else "<p>No finished cell to compare.</p>",
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
