"""A fidelity grid read back for people: the ``results.json`` that ``bench/fidelity.py`` writes
(one row per pair, ``moeproxy.repro.grid.row_of``) summarised per scenario x arm, as the
dashboard's Compare page, the HTML report (``moeproxy report --grid``) and ``bench/fidelity.py``'s
``table.md`` show it.

``load_grid(path)`` reads and checks the file: a regular JSON file holding a list of row objects,
each with every field ``row_of`` writes (``evaluation`` may be absent) of the right type, no pair
twice; anything else is one ``InputError`` naming the file, the row and what is wrong.
``summarise_grid(rows)`` groups the rows by scenario and arm (kind and keep ratio; the replica's
ratio is nominal, so all its rows of a scenario are one arm) and gives per cell, seeds pooled:

- verdict match ``k/n``;
- onset gap: mean and max of ``|onset proxy - onset full| / onset full`` over the pairs where
  both sides have an onset;
- curve agreement: the mean Pearson r of grad norm, loss and reward, each beside the replica arm's
  mean r in the same scenario (the noise ceiling: the full model against itself with another
  sampling seed), where the grid has a replica row;
- cost ratio: median over seeds of proxy/full step time, and of the training-state ratio.

``grid_rows(cells)`` are the same cells as text for a table (one dict per line, plus how well the
verdicts matched: ``all``, ``some`` or ``none``, for the marking); ``grid_table_html(cells)`` is that
table in HTML, escaped and marked (the dashboard and the report show it), ``grid_markdown(cells)``
in Markdown (table.md, the README). The figure is ``moeproxy.figures.fidelity_grid_figure``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from moeproxy.errors import InputError

MAX_GRID_BYTES = 64 * 2**20  # a 75-pair grid is 40 kB
CURVES = ("grad_norm", "loss", "reward")  # r_<curve> in a row
KIND_ORDER = ("cluster", "random", "dense", "replica")
CEILING_KIND = "replica"

_NUMBER = (int, float)
# field -> (accepted types, may be null); a row may carry more fields (later versions), never fewer
FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "scenario": ((str,), False), "kind": ((str,), False), "ratio": (_NUMBER, False), "seed": ((int,), False),
    "verdict_full": ((str,), True), "verdict_proxy": ((str,), True), "verdict_match": ((bool,), False),
    "onset_full": ((int,), True), "onset_proxy": ((int,), True), "onset_rel_diff": (_NUMBER, True),
    "r_grad_norm": (_NUMBER, True), "r_loss": (_NUMBER, True), "r_reward": (_NUMBER, True),
    "step_time_full": (_NUMBER, True), "step_time_proxy": (_NUMBER, True), "model_state_ratio": (_NUMBER, True),
}
OPTIONAL_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {"evaluation": ((str,), True)}


def _type_name(value) -> str:
    return "null" if value is None else {bool: "boolean", int: "integer", float: "number", str: "string",
                                         list: "list", dict: "object"}.get(type(value), type(value).__name__)


def _check_row(where: str, row) -> dict:
    if not isinstance(row, dict):
        raise InputError(f"{where}: a JSON {_type_name(row)}, not a row object")
    missing = [name for name in FIELDS if name not in row]
    if missing:
        raise InputError(f"{where}: no {', '.join(missing)} (every row of bench/fidelity.py's results.json has "
                         f"{len(FIELDS)} fields: moeproxy.repro.grid.row_of)")
    for name, (types, nullable) in {**FIELDS, **OPTIONAL_FIELDS}.items():
        value = row.get(name)
        if value is None and (nullable or name not in row):
            continue
        # a boolean is no number, and a count is no boolean
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            expected = " or ".join(sorted({_type_name(t()) for t in types})) + (" or null" if nullable else "")
            raise InputError(f"{where}: {name} is {_type_name(value)} {str(value)[:40]!r}, expected {expected}")
    if not row["scenario"] or not row["kind"]:
        raise InputError(f"{where}: scenario and kind must not be empty")
    if not 0 < row["ratio"] <= 1:
        raise InputError(f"{where}: ratio {row['ratio']!r} is not a keep ratio in (0, 1]")
    return row


def check_grid(rows, where: str) -> list[dict]:
    """``rows`` (parsed JSON) checked as a grid's results: a list of complete rows, no pair twice."""
    if not isinstance(rows, list):
        hint = " (pass results.json, not a pair's fidelity.json)" if isinstance(rows, dict) else ""
        raise InputError(f"{where}: holds a JSON {_type_name(rows)}, not a list of grid rows{hint}")
    if not rows:
        raise InputError(f"{where}: no rows (the grid has run no pair yet)")
    seen: dict[tuple, int] = {}
    for n, row in enumerate(rows, 1):
        _check_row(f"{where}: row {n}", row)
        key = (row["scenario"], row["kind"], float(row["ratio"]), row["seed"])
        if key in seen:
            raise InputError(f"{where}: row {n} repeats row {seen[key]} (scenario {row['scenario']!r}, kind "
                             f"{row['kind']!r}, ratio {row['ratio']:g}, seed {row['seed']}); nothing is merged silently")
        seen[key] = n
    return rows


def load_grid(path: str | Path) -> list[dict]:
    """The rows of a grid's ``results.json``, checked (``InputError`` naming the file otherwise)."""
    from moeproxy.proxy.checkpoint import open_regular, parse_json_bytes
    from moeproxy.terminal import shown

    path = Path(path)
    where = f"grid file {shown(path)}"
    with open_regular(path, "grid file") as fh:  # a FIFO or device is refused, never waited on
        raw = fh.read(MAX_GRID_BYTES + 1)
    if len(raw) > MAX_GRID_BYTES:
        raise InputError(f"{where}: larger than {MAX_GRID_BYTES >> 20} MiB; not a grid's results.json")
    return check_grid(parse_json_bytes(raw, where), where)


@dataclass
class GridCell:
    """One scenario x arm of the grid, its seeds pooled."""

    scenario: str
    kind: str
    ratio: float | None  # None for the replica (its ratio is nominal)
    seeds: list[int]
    matches: int
    verdicts_full: dict[str, int]
    verdicts_proxy: dict[str, int]
    onset_gap_mean: float | None
    onset_gap_max: float | None
    r: dict[str, float | None]                   # curve -> mean r over seeds
    ceiling: dict[str, float | None] | None      # the replica arm's r in this scenario, None without one
    step_time_ratio: float | None                # median over seeds of proxy/full step time
    model_state_ratio: float | None              # median over seeds
    rows: list[dict] = field(default_factory=list, repr=False)

    @property
    def pairs(self) -> int:
        return len(self.seeds)

    @property
    def arm(self) -> str:
        return arm_label(self.kind, self.ratio)

    @property
    def match_fraction(self) -> float:
        return self.matches / self.pairs

    @property
    def match_level(self) -> str:
        return "all" if self.matches == self.pairs else "none" if self.matches == 0 else "some"

    @property
    def agreement(self) -> float | None:
        """Mean of the curves' mean r (those the rows have)."""
        return _mean([v for v in self.r.values() if v is not None])

    @property
    def ceiling_agreement(self) -> float | None:
        return _mean([v for v in (self.ceiling or {}).values() if v is not None])


def arm_label(kind: str, ratio: float | None) -> str:
    """``cluster 1/4``, ``random 0.3``, ``replica``."""
    if ratio is None:
        return kind
    inverse = Fraction(1 / ratio).limit_denominator(1000)
    return f"{kind} 1/{inverse.numerator}" if inverse.denominator == 1 and ratio < 1 else f"{kind} {ratio:g}"


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _mean(values) -> float | None:
    values = _finite(values)
    return statistics.mean(values) if values else None


def _median(values) -> float | None:
    values = _finite(values)
    return statistics.median(values) if values else None


def _counts(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[str(value) if value is not None else "none"] = counts.get(str(value) if value is not None else "none", 0) + 1
    return counts


def _arm_key(kind: str, ratio: float | None) -> tuple:
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (rank, kind, -(ratio or 0.0))


def summarise_grid(rows: list[dict]) -> list[GridCell]:
    """One cell per scenario x arm: scenarios in the order the file first names them, arms
    clustering first (largest ratio first), then random, dense, replica, then any other kind."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        ratio = None if row["kind"] == CEILING_KIND else float(row["ratio"])
        groups.setdefault((row["scenario"], row["kind"], ratio), []).append(row)
    scenarios = list(dict.fromkeys(row["scenario"] for row in rows))
    ceilings = {scenario: {curve: _mean(r[f"r_{curve}"] for r in group) for curve in CURVES}
                for (scenario, kind, _), group in groups.items() if kind == CEILING_KIND}
    cells = []
    for (scenario, kind, ratio), group in sorted(
            groups.items(), key=lambda item: (scenarios.index(item[0][0]), _arm_key(item[0][1], item[0][2]))):
        group = sorted(group, key=lambda r: r["seed"])
        gaps = _finite(r["onset_rel_diff"] for r in group)
        step_ratios = [r["step_time_proxy"] / r["step_time_full"] for r in group
                       if r["step_time_proxy"] is not None and r["step_time_full"]]
        cells.append(GridCell(
            scenario=scenario, kind=kind, ratio=ratio, seeds=[r["seed"] for r in group],
            matches=sum(1 for r in group if r["verdict_match"]),
            verdicts_full=_counts(r["verdict_full"] for r in group),
            verdicts_proxy=_counts(r["verdict_proxy"] for r in group),
            onset_gap_mean=statistics.mean(gaps) if gaps else None, onset_gap_max=max(gaps) if gaps else None,
            r={curve: _mean(r[f"r_{curve}"] for r in group) for curve in CURVES},
            ceiling=ceilings.get(scenario) if kind != CEILING_KIND else None,
            step_time_ratio=_median(step_ratios), model_state_ratio=_median(r["model_state_ratio"] for r in group),
            rows=group))
    return cells


MATCH_MARK = {"all": "✓", "some": "◐", "none": "✗"}  # beside the colour, for readers who do not see it


def _r_text(value: float | None, ceiling: float | None, has_ceiling: bool) -> str:
    text = "n/a" if value is None else f"{value:+.2f}"
    if has_ceiling:
        text += f" (ceiling {'n/a' if ceiling is None else f'{ceiling:+.2f}'})"
    return text


def _verdicts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{v}×{c}" if c > 1 else v for v, c in counts.items())


def grid_rows(cells: list[GridCell]) -> list[dict]:
    """The table the pages show: one dict of text cells per scenario x arm, plus ``match_level``
    (``all``/``some``/``none``) for marking the verdict-match cell."""
    out = []
    for cell in cells:
        has_ceiling = cell.ceiling is not None
        ratio = (f"{cell.step_time_ratio:.2f}" if cell.step_time_ratio is not None else "n/a")
        out.append({
            "scenario": cell.scenario, "arm": cell.arm, "seeds": ",".join(map(str, cell.seeds)),
            "verdict match": f"{MATCH_MARK[cell.match_level]} {cell.matches}/{cell.pairs}",
            "verdict full → proxy": f"{_verdicts_text(cell.verdicts_full)} → {_verdicts_text(cell.verdicts_proxy)}",
            "onset gap mean/max": ("n/a" if cell.onset_gap_mean is None
                                   else f"{cell.onset_gap_mean:.0%}/{cell.onset_gap_max:.0%}"),
            **{f"r {curve}": _r_text(cell.r[curve], (cell.ceiling or {}).get(curve), has_ceiling) for curve in CURVES},
            "step time proxy/full": ratio,
            "state proxy/full": f"{cell.model_state_ratio:.2f}" if cell.model_state_ratio is not None else "n/a",
            "match_level": cell.match_level,
        })
    return out


def grid_table_html(cells: list[GridCell]) -> str:
    """``grid_rows`` as one HTML table, every text escaped, the verdict-match cells tinted by how
    well they matched (inline styles and ``class="match-all|some|none"``): the same table in the
    dashboard (``st.html``, never Markdown) and in the HTML report."""
    import html

    from moeproxy.figures import MATCH_BACKGROUND

    rows = grid_rows(cells)
    if not rows:
        return ""
    cell = "border:1px solid #ddd;padding:.3em .6em;text-align:left;font-size:.9em"
    head = "".join(f'<th style="{cell};background:#f5f5f5">{html.escape(k)}</th>' for k in rows[0] if k != "match_level")

    def td(key: str, value: str, level: str) -> str:
        if key == "verdict match":
            return (f'<td class="match-{level}" style="{cell};background:{MATCH_BACKGROUND[level]};font-weight:600;'
                    f'white-space:nowrap">{html.escape(value)}</td>')
        return f'<td style="{cell}{";white-space:nowrap" if key == "arm" else ""}">{html.escape(value)}</td>'

    body = "".join("<tr>" + "".join(td(k, v, row["match_level"]) for k, v in row.items() if k != "match_level")
                   + "</tr>" for row in rows)
    return (f'<div style="overflow-x:auto"><table class="fidelity-grid" style="border-collapse:collapse;margin:.5em 0">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def grid_markdown(cells: list[GridCell]) -> str:
    """``grid_rows`` as a Markdown table (for table.md and the README)."""
    rows = [{k: v for k, v in row.items() if k != "match_level"} for row in grid_rows(cells)]
    if not rows:
        return ""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(row[k]).replace("|", "\\|") for k in head) + " |" for row in rows]
    return "\n".join(lines)


def write_grid_figure(cells: list[GridCell], out: str | Path) -> tuple[list[Path], str]:
    """The heat map as ``OUT/grid.png`` and ``OUT/grid.svg`` where plotly's static export works
    (it needs the kaleido package); else as ``OUT/grid.html``, standalone (plotly.js inlined: opens
    offline). Returns the files written and a line saying which, and why."""
    from moeproxy.figures import fidelity_grid_figure

    out = Path(out)
    fig = fidelity_grid_figure(cells)
    try:
        import kaleido  # noqa: F401  (plotly's static image export)

        written = [out / "grid.png", out / "grid.svg"]
        fig.write_image(written[0], scale=2)
        fig.write_image(written[1])
        return written, f"wrote the grid figure as {written[0].name} and {written[1].name}"
    except Exception as exc:  # no kaleido, or kaleido without the browser it drives
        why = "kaleido is not installed" if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        target = out / "grid.html"
        fig.write_html(target, include_plotlyjs=True, full_html=True, config={"displaylogo": False})
        return [target], (f"wrote the grid figure as {target.name} (standalone HTML): no PNG/SVG, {why}"
                          " (pip install kaleido for static images)")
