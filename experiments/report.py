"""A self-contained HTML report of a sweep: figures embedded, summary tables, failures, provenance."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from .plots import compared, plot_all, rules

STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
         "img{max-width:100%;border:1px solid #eee}")


def _ratio_table(table: pd.DataFrame, value: str, strategy: str) -> pd.DataFrame:
    ref = f"{value}_ref"
    rows = compared(table, value, strategy).copy()
    if rows.empty:
        return pd.DataFrame()
    rows["proven"] = rows[f"{ref}_status"] == "optimal"
    rows["ratio"] = (rows[value] / rows[ref].where(rows[ref] > 0)).where(rows["proven"])
    rows["at_optimum"] = (rows[value] == rows[ref]) & rows["proven"]
    grouped = rows.groupby(["family", *rules(rows), strategy], dropna=False)
    return pd.DataFrame({
        "rows": grouped.size(), "proven optimum": grouped["proven"].sum(),
        "mean ratio": grouped["ratio"].mean().round(3), "max ratio": grouped["ratio"].max().round(3),
        "at optimum": grouped["at_optimum"].sum(),
        "mean solve s": grouped[f"{strategy}_seconds"].mean().round(4)}).reset_index()


def _program_table(table: pd.DataFrame) -> pd.DataFrame:
    if "kernel_time_median" not in table:
        return pd.DataFrame()
    rows = table[(table["status"] == "ok")].dropna(subset=["kernel_time_median"])
    if rows.empty:
        return pd.DataFrame()
    grouped = rows.groupby(["instance", *rules(rows), "fusion"], dropna=False)
    return pd.DataFrame({
        "kernels": grouped["kernels"].first(), "traffic B": grouped["traffic"].first(),
        "time us (median)": (grouped["kernel_time_median"].median() * 1e6).round(1),
        "peak est B (best order)": grouped["peak"].min(), "peak measured B": grouped["peak_measured"].min(),
        "compile s": grouped["compile_seconds"].mean().round(2),
        "max abs error": grouped["max_abs_error"].max()}).reset_index()


def _failures(table: pd.DataFrame) -> pd.DataFrame:
    bad = table[table["status"] != "ok"]
    return pd.DataFrame({"instance": bad["instance"], "fusion": bad["fusion"], "order": bad["order"],
                         "status": bad["status"],
                         "error": bad["error"].fillna("").map(lambda e: e.strip().splitlines()[-1][:160] if e else "")})


def _section(title: str, frame: pd.DataFrame, note: str = "") -> str:
    if frame.empty:
        return ""
    return f"<h2>{html.escape(title)}</h2>{note}{frame.to_html(index=False, na_rep='', border=0)}"


def sweep_name(results: str | Path) -> str:
    """The name of the sweep whose results are at ``results``: its config's (``config.toml``
    beside the table), else the folder's."""
    import tomllib
    folder = Path(results) if Path(results).is_dir() else Path(results).parent
    try:
        return str(tomllib.loads((folder / "config.toml").read_text()).get("name", folder.name))
    except (OSError, tomllib.TOMLDecodeError):
        return folder.resolve().name


def write_report(table: pd.DataFrame, out: str | Path, title: str = "Stax sweep") -> Path:
    """Draw the figures into ``out`` and write ``out/report.html`` (figures embedded); return its path."""
    out = Path(out)
    figures = plot_all(table, out)
    first = table.iloc[0] if len(table) else {}
    status = table["status"].value_counts().to_dict() if len(table) else {}
    provenance = (f"<p>{len(table)} cells: {', '.join(f'{v} {k}' for k, v in status.items())}. "
                  f"Code {html.escape(str(first.get('code_version', '')))}, git {str(first.get('git_commit', ''))[:12]}"
                  f"{' (dirty)' if first.get('git_dirty') else ''}; machine {html.escape(str(first.get('machine', '')))} "
                  f"({html.escape(str(first.get('cpu', '')))}, {first.get('cpu_count', '')} cores); "
                  f"stax {first.get('stax_version', '')}, OR-Tools {first.get('ortools_version', '')}, "
                  f"numpy {first.get('numpy_version', '')}; dates {table['date'].min()} to {table['date'].max()}.</p>"
                  if len(table) else "<p>No cells.</p>")
    ratio_note = ("<p>Ratios are to the CP-SAT reference and only where it is proven optimal "
                  "(<i>proven optimum</i> counts those rows).</p>")
    images = "".join(f"<h3>{p.stem.replace('_', ' ')}</h3><img src='data:image/png;base64,"
                     f"{base64.b64encode(p.read_bytes()).decode()}'>" for p in figures)
    body = "".join([
        f"<h1>{html.escape(title)}</h1>", provenance, "<h2>Figures</h2>", images,
        _section("Fusion strategies: traffic against the optimum", _ratio_table(table, "traffic", "fusion"), ratio_note),
        _section("Order strategies: peak memory against the optimum", _ratio_table(table, "peak", "order"), ratio_note),
        _section("Programs: kernels, traffic, measured time and memory", _program_table(table)),
        _section("Failed or timed-out cells", _failures(table)),
    ])
    path = out / "report.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                    f"<style>{STYLE}</style></head><body>{body}</body></html>")
    return path
