"""What a user-model run leaves: a text verdict, CSV per reply and per second, JSON, a plot,
and report.html (built from the JSON: the verdict first)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

from server.loadtest.lib import cpu
from server.loadtest.lib.chat_record import SessionRecord, count_crossed
from server.loadtest.lib.html_report import Report
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
                      "reply_timeout_s": model.reply_timeout_s, "seed": model.seed,
                      "arrival_rate": model.arrival_rate},
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
    arriving = (f"arriving over {m['ramp_s']:g} s" if m.get("arrival_rate") is None else
                f"arriving as a Poisson process of {m['arrival_rate']:g}/s (the last at {m['ramp_s']:.1f} s)")
    lines = [
        f"{s['users']} users through the {result['through']} at {result['url']}: {turns}, think "
        f"{m['think_s']:g} s, {arriving}{window}; {s['wall_s']:.1f} s in all",
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
    if "cpu" in result:
        lines.append(cpu.render_run(result["cpu"]))
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
    return paths + [html_report(result, out_dir)]


def html_report(result: dict, out_dir: Path) -> Path:
    """report.html of a summary.json: PASS or FAIL and why, the run, its figures, the timeline."""
    s, m = result["summary"], result["model"]
    st = s["steady"]
    problems = [f"{s[k]} {k}" for k in ("refused", "lost", "incomplete", "errors") if s.get(k)]
    if s.get("crossed"):
        problems.append(f"{s['crossed']} crossed")
    verdict = (f"{'PASS' if s['ok'] else 'FAIL'}: {s['users']} users, {s['complete']} complete "
               f"replies of {s['messages']} messages" + (f"; {', '.join(problems)}" if problems else ""))
    arriving = (f"evenly over {m['ramp_s']:g} s" if m.get("arrival_rate") is None else
                f"Poisson, {m['arrival_rate']:g} users/s (the last at {m['ramp_s']:.1f} s)")
    page = Report(f"qa-load: {s['users']} users through the {result['through']}", verdict, s["ok"],
                  str(result.get("url", "")))
    page.facts("The run", [("through", result["through"]), ("address", result.get("url")),
                           ("users", s["users"]), ("arrivals", arriving),
                           ("turns", m["turns"] or "until the send window closes"),
                           ("think s", m["think_s"]), ("send window s", m.get("window_s")),
                           ("seed", m.get("seed")), ("wall s", fmt(s["wall_s"], 1))])
    page.table("Outcomes", ["chats opened", "messages", "complete", "refused", "lost", "crossed",
                            "incomplete", "errors"],
               [[f"{s['opened']}/{s['users']}", s["messages"], s["complete"], s["refused"], s["lost"],
                 "n/a" if s["crossed"] is None else s["crossed"], s["incomplete"], s["errors"]]])
    page.table(f"Steady state ({fmt(st['from_s'])}-{fmt(st['to_s'])} s)",
               ["replies", "TTFT p50 ms", "TTFT p99 ms", "tokens/s per user p10", "p50",
                "replies/s", "tokens/s"],
               [[st["replies"], fmt(st["ttft_ms_p50"]), fmt(st["ttft_ms_p99"]),
                 fmt(st["user_tokens_per_s_p10"], 1), fmt(st["user_tokens_per_s_p50"], 1),
                 fmt(st["replies_per_s"], 2), fmt(st["tokens_per_s"])]])
    page.text("Errors", [f"{n} x {reason}" for reason, n in s["error_reasons"].items()], warn=True)
    if result.get("cpu"):
        page.table("CPU by kind of process", *cpu.table([("the run", result["cpu"])]), note=cpu.TABLE_NOTE)
    page.images("Timeline", [out_dir / "timeline.png"])
    page.pre("As printed", render(result))
    return page.write(out_dir)
