"""tune's results folder: tune.json, written after every point, read back by ``--resume``,
and the plot.

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

from server.loadtest.tune_choice import Outcome, TuneError, plot_rows, shared_label

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


def write_final(out_dir: Path, header: dict, outcomes: list[Outcome], chosen: Optional[Outcome],
                need: int, need_source: str, explanation: str) -> list[Path]:
    """tune.json with the choice, and tune.png."""
    paths = [write(out_dir, header, outcomes, {
        "need_max_model_len": need, "need_source": need_source,
        "chosen": outcomes.index(chosen) if chosen else None,
        "chosen_env": chosen.point.env_values() if chosen else None, "explanation": explanation})]
    try:
        from server.loadtest import plots
        paths.append(plots.plot_tune(plot_rows(outcomes, chosen, need), need, out_dir / "tune.png",
                                     shared_label(outcomes)))
    except ImportError as exc:
        print(f"[tune] plot skipped ({exc})")
    return paths
