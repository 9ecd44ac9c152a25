"""The repository's Grafana dashboard drawn as a PNG from a running Prometheus, without Grafana.

    .venv/bin/python benchmarks/monitoring/dashboard_png.py --prometheus http://127.0.0.1:9090 \
        --minutes 10 --out dashboard.png [--model NAME ...]

Reads server/stack/monitoring/grafana-dashboard.json, asks Prometheus each panel's queries over
the last ``--minutes`` (``/api/v1/query_range``; a stat panel: the last value) and draws the
panels in the dashboard's own grid, its ``model`` variable All unless ``--model`` picks models
as Grafana's picker does.  It shows what the dashboard shows where Grafana is not installed
(Debian has no package of it), and it fails loudly on a query Prometheus refuses.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from server.stack import dashboard as dashboard_file  # noqa: E402

GRID_COLUMNS = 24  # Grafana's grid


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    kind: str  # "stat" or "timeseries"
    title: str
    unit: str
    x: int
    y: int
    w: int
    h: int
    queries: tuple[Query, ...]


def panels_of(dashboard: dict) -> list[Panel]:
    """The drawable panels, in the dashboard's grid units."""
    found = []
    for p in dashboard["panels"]:
        if p.get("type") not in ("stat", "timeseries"):
            continue
        grid = p["gridPos"]
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        queries = tuple(Query(t["expr"], t.get("legendFormat", "")) for t in p.get("targets", ()))
        found.append(Panel(p["type"], p["title"], unit, grid["x"], grid["y"], grid["w"], grid["h"], queries))
    return found


def legend(template: str, labels: dict) -> str:
    """Grafana's ``{{label}}`` legend filled in from a series' labels."""
    text = template
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text or ", ".join(f"{k}={v}" for k, v in labels.items()) or "value"


def shown(value: float, unit: str) -> str:
    if unit == "percentunit":
        return f"{100 * value:.1f} %"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"


def query_range(client: httpx.Client, url: str, expr: str, start: float, end: float, step_s: float) -> list:
    answer = client.get(f"{url}/api/v1/query_range",
                        params={"query": expr, "start": start, "end": end, "step": step_s}).json()
    if answer.get("status") != "success":
        raise SystemExit(f"Prometheus refused {expr!r}: {answer.get('error', answer)}")
    return answer["data"]["result"]


def draw(panels: list[Panel], series: list[list], out: Path, title: str, t0: float) -> None:
    """The panels in the dashboard's grid; a graph leaves its panel's top row to its title and
    the ticks above it, as Grafana's panel header does.  Time in minutes from ``t0``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(p.y + p.h for p in panels)
    fig = plt.figure(figsize=(18, rows * 0.5))
    fig.suptitle(title, fontsize=13)
    grid = fig.add_gridspec(rows, GRID_COLUMNS, hspace=2.5, wspace=1.2)
    for panel, lines in zip(panels, series):
        top = panel.y + (panel.kind != "stat")
        ax = fig.add_subplot(grid[top:panel.y + panel.h, panel.x:panel.x + panel.w])
        ax.set_title(panel.title, fontsize=9, loc="left")
        if panel.kind == "stat":
            ax.axis("off")
            last = [f"{shown(values[-1][1], panel.unit)}" + (f"  {name}" if len(lines) > 1 else "")
                    for name, values in lines if values]
            ax.text(0.5, 0.4, "\n".join(last) or "no data", ha="center", va="center",
                    fontsize=16 if len(last) < 2 else 12, transform=ax.transAxes)
            continue
        for name, values in lines:
            if values:
                ax.plot([(t - t0) / 60 for t, _ in values], [v for _, v in values], label=name)
        if not any(values for _, values in lines):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.tick_params(labelsize=7)
        ax.set_xlim(0, None)
        ax.set_xlabel("minutes", fontsize=7)
        if any(values for _, values in lines):
            ax.legend(fontsize=6, loc="upper left")
    fig.savefig(out, dpi=90, bbox_inches="tight")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"))
    parser.add_argument("--model", action="append", help="a served name the vLLM panels show "
                        "(again for more; default: All)")
    args = parser.parse_args()
    dashboard = dashboard_file.with_models(dashboard_file.load(), args.model)
    panels = panels_of(dashboard)
    end = time.time()
    start = end - 60 * args.minutes
    step_s = max(1.0, 60 * args.minutes / 240)
    # One list of series per panel, by position: two panels may share a title (the KV cache's
    # figure and its graph).
    with httpx.Client(timeout=30) as client:
        series = [[(legend(q.legend, r["metric"]), [(float(t), float(v)) for t, v in r["values"]
                                                    if v not in ("NaN", "+Inf", "-Inf")])
                   for q in panel.queries
                   for r in query_range(client, args.prometheus.rstrip("/"), q.expr, start, end, step_s)]
                  for panel in panels]
    draw(panels, series, args.out, f"{dashboard.get('title', 'dashboard')}: the last {args.minutes:g} min", start)
    print(f"{args.out}: {len(panels)} panels, {sum(len(v) for v in series)} series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
