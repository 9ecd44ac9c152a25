"""The figures of a user-model run: its verdict, its steady state, second by second (pure).

Definitions (times from the start of the run):

* TTFT: from sending a message to the first reply text the user saw;
* a reply's decode rate: its tokens after the first over the time after the first
  (what the user watched stream); a user's rate: all its replies' tokens after the
  first over all their decode time; the per-user figures are percentiles over users;
* tokens/s of a second: each finished reply's tokens spread evenly over its decode
  span, so a long reply counts in every second it streamed;
* lost: a message that got no whole reply (an error, or none in time); incomplete:
  a reply whose final text is not what was streamed; crossed: a message of one chat
  that reached another (``chat_record.count_crossed``, app only);
* outcomes: each message complete, continued (complete after its socket came back or
  another worker carried the reply on), busy_waited (complete after the app said the
  engine was busy), limited or busy_refused (the app answered that its user is over a
  limit, or the engine too busy: answers, not failures; ``refused`` counts them), failed
  (the app said what went wrong) or lost (no whole reply, and no word why)
  (``chat_record.outcome_of``).

The steady state is the replies sent after every user has arrived (``ramp_s``)
and before the send window closes; a run without a window uses all replies.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

from server.loadtest.lib.chat_record import OUTCOMES, REFUSALS
from server.loadtest.users.model import ReplyRecord, UserRecord
from server.plan.kv_planner import percentile

MS = 1000.0
LIVE_WINDOW_S = 10.0


def pct(values: list[float], q: float, scale: float = 1.0) -> Optional[float]:
    return percentile(values, q) * scale if values else None


def user_rates(replies: Iterable[ReplyRecord]) -> list[float]:
    """Each user's decode rate over all its replies with one (tokens/s)."""
    tokens: dict[int, float] = {}
    spans: dict[int, float] = {}
    for r in replies:
        if r.decode_tokens_per_s is not None:
            tokens[r.user] = tokens.get(r.user, 0) + r.tokens - 1
            spans[r.user] = spans.get(r.user, 0) + r.total_s - r.ttft_s
    return [tokens[u] / spans[u] for u in tokens]


def steady(replies: list[ReplyRecord], ramp_s: float, window_s: Optional[float]) -> list[ReplyRecord]:
    if window_s is None:
        return list(replies)
    return [r for r in replies if ramp_s <= r.sent_s < window_s]


def figures(replies: list[ReplyRecord], span_s: float) -> dict:
    """TTFT, per-user rates and throughput of a set of replies over ``span_s`` seconds."""
    ttft = [r.ttft_s for r in replies if r.ttft_s is not None]
    rates = user_rates(replies)
    done = [r for r in replies if r.complete]
    tokens = sum(r.tokens or 0 for r in done)
    return {
        "replies": len(replies),
        "ttft_ms_p50": pct(ttft, 50, MS), "ttft_ms_p99": pct(ttft, 99, MS),
        "user_tokens_per_s_p10": pct(rates, 10), "user_tokens_per_s_p50": pct(rates, 50),
        "users_with_rate": len(rates),
        "replies_per_s": len(done) / span_s if span_s > 0 else 0.0,
        "tokens_per_s": tokens / span_s if span_s > 0 else 0.0,
    }


def summarize_users(users: list[UserRecord], replies: list[ReplyRecord], crossed: Optional[int],
                    wall_s: float, ramp_s: float, window_s: Optional[float]) -> dict:
    """The whole run's accounting and verdict, and the steady state's figures."""
    replied = [r for r in replies if r.total_s is not None and not r.error]
    complete = [r for r in replied if r.complete]
    refused = [r for r in replies if r.outcome in REFUSALS]  # answered, but not with a reply
    not_opened = [u for u in users if u.error]
    failed = [r for r in replies if r.error]
    reasons: dict[str, int] = {}
    for reason in [u.error for u in not_opened] + [r.error for r in failed]:
        reasons[reason] = reasons.get(reason, 0) + 1
    measured = steady(replies, ramp_s, window_s)
    span = (window_s - ramp_s) if window_s is not None else wall_s
    summary = {
        "users": len(users), "opened": len(users) - len(not_opened),
        "messages": len(replies), "replied": len(replied), "complete": len(complete),
        "refused": len(refused), "lost": len(replies) - len(replied) - len(refused),
        "incomplete": len(replied) - len(complete),
        "crossed": crossed, "errors": len(not_opened) + len(failed),
        "error_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "outcomes": outcome_counts(replies),
        "wall_s": wall_s,
        "all": figures(replies, wall_s),
        "steady": {**figures(measured, span), "from_s": ramp_s if window_s is not None else 0.0,
                   "to_s": window_s if window_s is not None else wall_s},
    }
    summary["ok"] = bool(replies) and all(
        summary[k] == 0 for k in ("lost", "incomplete", "errors")) and not crossed
    return summary


def outcome_counts(replies: list[ReplyRecord]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in replies:
        counts[r.outcome or ("complete" if r.complete else "lost")] += 1
    return counts


def per_second(users: list[UserRecord], replies: list[ReplyRecord], wall_s: float) -> list[dict]:
    """One row per second of the run: users present, replies, tokens, TTFT, errors."""
    seconds = max(1, math.ceil(wall_s))
    rows = [{"second": s, "users_active": 0, "messages_sent": 0, "replies_done": 0,
             "tokens": 0.0, "errors": 0, "_ttft": []} for s in range(seconds)]
    at = lambda t: rows[min(seconds - 1, max(0, int(t)))]
    for u in users:
        left = u.left_s if u.left_s is not None else wall_s
        for row in rows:
            row["users_active"] += u.arrived_s <= row["second"] + 0.5 < left
    for r in replies:
        at(r.sent_s)["messages_sent"] += 1
        if r.error:
            at(r.sent_s)["errors"] += 1
        if r.first_token_at is not None:
            at(r.first_token_at)["_ttft"].append(r.ttft_s)
        if r.done_at is not None and not r.error:
            at(r.done_at)["replies_done"] += 1
            spread_tokens(rows, r)
    for row in rows:
        ttft = row.pop("_ttft")
        row["ttft_ms_p50"], row["ttft_ms_p99"] = pct(ttft, 50, MS), pct(ttft, 99, MS)
    return rows


def spread_tokens(rows: list[dict], r: ReplyRecord) -> None:
    """Add a finished reply's tokens to the seconds it streamed in, evenly over its decode span."""
    if not r.tokens or r.first_token_at is None or r.done_at is None:
        return
    start, end = r.first_token_at, max(r.done_at, r.first_token_at)
    last = len(rows) - 1
    if end - start <= 0:
        rows[min(last, int(start))]["tokens"] += r.tokens
        return
    rate = r.tokens / (end - start)
    second = int(start)
    while second <= min(last, int(end)):
        overlap = min(end, second + 1) - max(start, second)
        rows[second]["tokens"] += rate * max(0.0, overlap)
        second += 1


def live_counts(users: list[UserRecord], replies: list[ReplyRecord], now: float,
                window_s: float = LIVE_WINDOW_S) -> dict:
    """What the status line shows, as numbers that several client processes can add up."""
    since = max(0.0, now - window_s)
    done = [r for r in replies if r.done_at is not None and since <= r.done_at <= now and not r.error]
    return {"present": sum(u.arrived_s <= now and (u.left_s is None or u.left_s > now) for u in users),
            "users": len(users), "waiting": sum(r.total_s is None and not r.error for r in replies),
            "done": len(done), "tokens": sum(r.tokens or 0 for r in done),
            "errors": sum(bool(r.error) for r in replies) + sum(bool(u.error) for u in users),
            "span_s": max(1e-9, now - since)}


def live_line(counts: dict) -> str:
    span = counts["span_s"]
    return (f"users {counts['present']}/{counts['users']}  in flight {counts['waiting']}  "
            f"replies/s {counts['done'] / span:.1f}  tokens/s {counts['tokens'] / span:.0f}")


def live(users: list[UserRecord], replies: list[ReplyRecord], now: float,
         window_s: float = LIVE_WINDOW_S) -> str:
    """The status line: who is there now, and what the last ``window_s`` seconds looked like."""
    since = max(0.0, now - window_s)
    counts = live_counts(users, replies, now, window_s)
    ttft = [r.ttft_s for r in replies if r.first_token_at is not None and since <= r.first_token_at <= now]
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    return (f"{live_line(counts)}  TTFT p50 {fmt(pct(ttft, 50, MS))} p99 {fmt(pct(ttft, 99, MS))} ms "
            f"(last {window_s:.0f} s)  errors {counts['errors']}")
