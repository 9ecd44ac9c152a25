"""What a user-model run leaves: a text verdict, CSV per reply and per second, JSON, a plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

from server.loadtest.lib.chat_record import SessionRecord, count_crossed
from server.loadtest.users.model import ReplyRecord, UserModel, UserRecord, UsersRun
from server.loadtest.users.stats import per_second, summarize_users


def result_of(run: UsersRun, url: str, through: str) -> dict:
    """The run as JSON: the model, the summary with its verdict, every user and reply."""
    sessions = [chat.session.record for chat in run.chats if chat.session is not None]
    return result_from(run.model, run.users, run.replies, sessions, run.wall_s, url, through)


def result_from(model: UserModel, users: list[UserRecord], replies: list[ReplyRecord],
                sessions: list[SessionRecord], wall_s: float, url: str, through: str) -> dict:
    """The same from the parts, which may come from several client processes (a message that
    reached chats of two of them is still crossed)."""
    crossed: Optional[int] = count_crossed(sessions) if through == "app" else None
    summary = summarize_users(users, replies, crossed, wall_s, model.ramp_s, model.window_s)
    return {"kind": "ernie-chat qa-load users", "url": url, "through": through,
            "model": {"users": model.users, "turns": model.turns, "think_s": model.think_s,
                      "ramp_s": model.ramp_s, "window_s": model.window_s,
                      "reply_timeout_s": model.reply_timeout_s, "seed": model.seed},
            "summary": summary,
            "seconds": per_second(users, replies, wall_s),
            "users": [vars(u) for u in users],
            "replies": [r.as_dict() for r in replies]}


def fmt(value: Optional[float], digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(result: dict) -> str:
    s, m = result["summary"], result["model"]
    st = s["steady"]
    turns = f"{m['turns']} turns" if m["turns"] else "turns until the window closes"
    window = f", send window {m['window_s']:g} s" if m["window_s"] is not None else ""
    crossed = "n/a (direct to the engine)" if s["crossed"] is None else s["crossed"]
    lines = [
        f"{s['users']} users through the {result['through']} at {result['url']}: {turns}, think "
        f"{m['think_s']:g} s, arriving over {m['ramp_s']:g} s{window}; {s['wall_s']:.1f} s in all",
        f"  chats opened {s['opened']}/{s['users']}   messages {s['messages']}   complete replies "
        f"{s['complete']}   refused {s['refused']}   lost {s['lost']}   crossed {crossed}   "
        f"incomplete {s['incomplete']}   "
        f"errors {s['errors']}",
        "  messages " + "   ".join(f"{kind} {n}" for kind, n in s["outcomes"].items()),
        f"  steady state ({fmt(st['from_s'])}-{fmt(st['to_s'])} s, {st['replies']} replies): "
        f"TTFT p50 {fmt(st['ttft_ms_p50'])} ms, p99 {fmt(st['ttft_ms_p99'])} ms; per-user tokens/s "
        f"p10 {fmt(st['user_tokens_per_s_p10'], 1)}, p50 {fmt(st['user_tokens_per_s_p50'], 1)}; "
        f"{st['replies_per_s']:.2f} replies/s, {st['tokens_per_s']:.0f} tokens/s",
    ]
    lines += [f"  {n} x {reason}" for reason, n in s["error_reasons"].items()]
    lines.append("PASS" if s["ok"] else "FAIL")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def save(result: dict, out_dir: Path, plots: bool = True) -> list[Path]:
    """summary.json (everything), replies.csv, seconds.csv and timeline.png under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    paths = [summary, write_csv(out_dir / "replies.csv", result["replies"]),
             write_csv(out_dir / "seconds.csv", result["seconds"])]
    if plots:
        from server.loadtest.lib import plots as plotting
        title = (f"{result['summary']['users']} users through the {result['through']} "
                 f"({'PASS' if result['summary']['ok'] else 'FAIL'})")
        paths.append(plotting.timeline(result["seconds"], title, out_dir / "timeline.png"))
    return paths
