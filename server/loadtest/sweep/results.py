"""tune's results folder: tune.json, written after every point, read back by ``--resume``
and ``--plot-only``, the plot, and report.html (built from tune.json: the point chosen first).

``tune.json`` holds the sweep's header (what makes it the same sweep: model, device,
load, repeats, the points' labels), every point's outcome with each run's summary and
the spreads, and at the end the choice and why.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from server.loadtest.lib.html_report import Report
from server.loadtest.sweep.choice import (Outcome, TuneError, plot_panels, plot_rows, render_table,
                                          shared_label)
from server.loadtest.sweep.users_runs import UsersLoad

RESUMABLE = ("not run", "cut")  # statuses a --resume runs again


def write(out_dir: Path, header: dict, outcomes: list[Outcome], extra: Optional[dict] = None) -> Path:
    path = out_dir / "tune.json"
    path.write_text(json.dumps({
        "kind": "ernie-chat tune", "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command_line": shlex.join(sys.argv), **header,
        "points": [o.as_dict() for o in outcomes], **(extra or {}),
    }, indent=1) + "\n", encoding="utf-8")
    return path


def take_done(out_dir: Path, header: dict, outcomes: list[Outcome], repeats: int) -> int:
    """Put the points the folder's tune.json has done into ``outcomes``; how many are done.

    A point is done when it failed, or was measured with all its runs; the rest run again.
    """
    path = out_dir / "tune.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TuneError(f"--resume: cannot read {path} ({exc}).") from None
    as_saved = json.loads(json.dumps(header))  # tuples come back as lists
    changed = [k for k, v in as_saved.items() if saved.get(k) != v]
    if changed:
        raise TuneError(f"--resume: {path} is another sweep ({', '.join(changed)} differ); give the "
                        "same command, or another --out.")
    for i, outcome in enumerate(Outcome.from_dict(p) for p in saved["points"]):
        if outcome.status == "failed" or (outcome.status == "measured" and len(outcome.runs) >= repeats):
            outcomes[i] = outcome
    return sum(o.status not in RESUMABLE for o in outcomes)


def show(path: Path) -> list[Path]:
    """``tune --plot-only``: the table, the explanation and tune.png of a saved sweep, e.g.
    one run on a GPU machine without matplotlib."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        outcomes = [Outcome.from_dict(p) for p in saved["points"]]
    except (OSError, ValueError, KeyError) as exc:
        raise TuneError(f"--plot-only {path}: not a tune.json ({exc}).") from None
    chosen = outcomes[saved["chosen"]] if saved.get("chosen") is not None else None
    print(render_table(outcomes, chosen))
    print("\n" + saved.get("explanation", ""))
    need = saved.get("need_max_model_len") or 0
    return plot(outcomes, chosen, need, path.parent) + [html_report(saved, path.parent)]


def html_report(saved: dict, out_dir: Path) -> Path:
    """report.html of a tune.json: the point chosen (and its settings) first, then why, the
    table of every point and tune.png."""
    outcomes = [Outcome.from_dict(p) for p in saved.get("points", [])]
    index = saved.get("chosen")
    chosen = outcomes[index] if index is not None and index < len(outcomes) else None
    if chosen is not None:
        env = " ".join(f"{k}={'' if v is None else v}" for k, v in (saved.get("chosen_env") or {}).items())
        text, ok = f"Point chosen: {chosen.point.label()}" + (f" ({env})" if env else ""), True
    else:
        text, ok = "No point chosen" + (f": {saved['explanation']}" if saved.get("explanation") else ""), False
    page = Report("tune: the engine's settings", text, ok, f"finished {saved.get('finished', '-')}")
    page.facts("The sweep", [(key, saved.get(key)) for key in ("model", "device", "repeats")
                             if key in saved] + [
        ("tokens the choice must serve", saved.get("need_max_model_len")),
        ("because", saved.get("need_source")), ("points", len(outcomes)),
        ("every run", UsersLoad.from_dict(saved["users"]).describe() if saved.get("users") else
         "the bench load"),
        ("command", saved.get("command_line"))])
    page.text("Why", (saved.get("explanation") or "").splitlines())
    page.pre("Every point", render_table(outcomes, chosen))
    page.images("Plot", [out_dir / "tune.png"])
    return page.write(out_dir)


def plot(outcomes: list[Outcome], chosen: Optional[Outcome], need: int, out_dir: Path) -> list[Path]:
    try:
        from server.loadtest.lib import plots
    except ImportError as exc:  # a GPU machine without matplotlib: `tune --plot-only` later
        print(f"[tune] plot skipped ({exc}); draw it elsewhere with `ernie-chat tune --plot-only "
              f"{out_dir / 'tune.json'}`")
        return []
    rows = plot_rows(outcomes, chosen, need)
    return [plots.plot_tune(rows, plot_panels(rows), need, out_dir / "tune.png", shared_label(outcomes))]


def write_final(out_dir: Path, header: dict, outcomes: list[Outcome], chosen: Optional[Outcome],
                need: int, need_source: str, explanation: str) -> list[Path]:
    """tune.json with the choice, tune.png and report.html."""
    path = write(out_dir, header, outcomes, {
        "need_max_model_len": need, "need_source": need_source,
        "chosen": outcomes.index(chosen) if chosen else None,
        "chosen_env": chosen.point.env_values() if chosen else None, "explanation": explanation})
    pngs = plot(outcomes, chosen, need, out_dir)
    return [path, *pngs, html_report(json.loads(path.read_text(encoding="utf-8")), out_dir)]
