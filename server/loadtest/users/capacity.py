"""``ernie-chat capacity``: how many chat users one machine serves within an objective.

Each step is a steady-state run of the user model (``server.loadtest.users.model``)
with N users who keep chatting (send, read the whole reply, think, send again)
for ``--step-s`` seconds after arriving over ``--ramp-s``; only the replies sent
once everyone has arrived are measured.  A step is within the objective when

* no message was lost or failed and no reply crossed into another chat,
* TTFT p99 <= ``--objective-ttft-p99-ms``, and
* the per-user decode rate at p10 >= ``--objective-tokens-per-s`` (nine users in
  ten saw their replies stream at least that fast),

The search doubles N from ``--start-users`` while steps pass, then bisects
between the last pass and the first failure until they are within
``--precision`` of each other.  A step that fails is run again (``--retries``,
default 1) and fails only if every try does: one stall of a busy machine (a 13-s
TTFT p99 at 4 users, once, on the 2-core CPU box) must not end the search.  The answer is the largest N that passed below
the first failure.  The same users go through the app's websocket
(``--through app``) or straight to the engine's OpenAI API (``--through
engine``), so the two answers show what the app costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server.engine_key import engine_key
from server.errors import LoadTestError
from server.loadtest.lib import cpu
from server.loadtest.lib.chat_socket import read_prompts
from server.loadtest.lib.html_report import Report
from server.loadtest.lib.load_args import add_model_argument, chat_profile, results_folder, served_model
from server.loadtest.users import report as user_report
from server.loadtest.users.chats import PATHS, Target
from server.loadtest.users.load import sampled_user_load
from server.loadtest.users.model import MAX_USERS, UserModel

SETTLE_S = 2.0  # between steps: the engine finishes aborting what the last step left


class CapacityError(LoadTestError):
    """A capacity search that cannot run (bad objective or bounds); the message says why."""


@dataclass(frozen=True)
class Objective:
    ttft_p99_ms: float = 1000.0
    tokens_per_s: float = 20.0

    def check(self, steady: dict, summary: dict) -> tuple[bool, str]:
        """(within the objective, why not) for one step's figures."""
        if summary["lost"] or summary["errors"] or summary["crossed"]:
            return False, "lost, failed or crossed replies"
        if not steady["replies"] or steady["ttft_ms_p99"] is None:
            return False, "no reply in the steady state (make --step-s longer)"
        if steady["ttft_ms_p99"] > self.ttft_p99_ms:
            return False, f"TTFT p99 {steady['ttft_ms_p99']:.0f} ms > {self.ttft_p99_ms:g}"
        rate = steady["user_tokens_per_s_p10"]
        if rate is None or rate < self.tokens_per_s:
            shown = "-" if rate is None else f"{rate:.1f}"
            return False, f"per-user tokens/s p10 {shown} < {self.tokens_per_s:g}"
        return True, ""


def bounds(results: dict[int, bool]) -> tuple[int, Optional[int]]:
    """(largest pass below the first failure or 0, smallest failure or None)."""
    failed = [n for n, ok in results.items() if not ok]
    high = min(failed) if failed else None
    low = max((n for n, ok in results.items() if ok and (high is None or n < high)), default=0)
    return low, high


def next_users(results: dict[int, bool], start: int, max_users: int,
               precision: float) -> Optional[int]:
    """The next number of users to try, or None when the search is over."""
    if not results:
        return start
    low, high = bounds(results)
    if high is None:
        return None if low >= max_users else min(max_users, 2 * low)
    if high - low <= max(1, int(precision * low)):
        return None
    middle = (low + high) // 2
    return None if middle in results or middle <= low else middle


def step_row(users: int, summary: dict, objective: Objective) -> dict:
    steady = summary["steady"]
    ok, why = objective.check(steady, summary)
    return {"users": users, "ttft_ms_p50": steady["ttft_ms_p50"], "ttft_ms_p99": steady["ttft_ms_p99"],
            "user_tokens_per_s_p10": steady["user_tokens_per_s_p10"],
            "user_tokens_per_s_p50": steady["user_tokens_per_s_p50"],
            "replies_per_s": steady["replies_per_s"], "tokens_per_s": steady["tokens_per_s"],
            "replies": steady["replies"], "errors": summary["errors"] + summary["lost"]
            + (summary["crossed"] or 0), "pass": ok, "why": why}


def render_table(rows: list[dict]) -> str:
    fmt = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"
    lines = ["  users  TTFT p50 ms  TTFT p99 ms  tok/s/user p10  p50   replies/s  errors  result"]
    for r in sorted(rows, key=lambda r: r["users"]):
        lines.append(f"  {r['users']:>5}  {fmt(r['ttft_ms_p50']):>11}  {fmt(r['ttft_ms_p99']):>11}  "
                     f"{fmt(r['user_tokens_per_s_p10'], 1):>14}  {fmt(r['user_tokens_per_s_p50'], 1):>5}"
                     f"  {r['replies_per_s']:>9.2f}  {r['errors']:>6}  "
                     f"{'pass' if r['pass'] else 'FAIL: ' + r['why']}")
    return "\n".join(lines)


def answer(rows: list[dict], objective: Objective, max_users: int, through: str) -> str:
    low, high = bounds({r["users"]: r["pass"] for r in rows})
    within = (f"TTFT p99 <= {objective.ttft_p99_ms:g} ms and >= {objective.tokens_per_s:g} "
              "tokens/s per user (p10)")
    if low == 0:
        return f"No number of users tried was within the objective ({within}) through the {through}."
    more = " (the most tried; more may fit: raise --max-users)" if high is None and low >= max_users else ""
    return f"{low} users within the objective ({within}) through the {through}{more}."


async def search(target: Target, objective: Objective, base: UserModel, prompts: list[str],
                 start: int, max_users: int, precision: float, retries: int,
                 out_dir: Path, processes: int = 1) -> list[dict]:
    rows: list[dict] = []
    while (users := next_users({r["users"]: r["pass"] for r in rows}, start, max_users,
                               precision)) is not None:
        model = UserModel(users=users, turns=0, think_s=base.think_s, ramp_s=base.ramp_s,
                          window_s=base.window_s, reply_timeout_s=base.reply_timeout_s,
                          seed=base.seed)
        for attempt in range(1 + retries):
            # A search whose first step fails goes down to one user: never more processes than users.
            result = await sampled_user_load(target, model, prompts, f"capacity {users} users",
                                             min(processes, users))
            user_report.save(result, out_dir / f"users-{users}-try-{attempt + 1}", plots=False)
            row = {**step_row(users, result["summary"], objective), "tries": attempt + 1,
                   "cpu": result["cpu"]}
            print(render_table([row]).splitlines()[-1] + "\n" + cpu.render_run(row["cpu"]), flush=True)
            await asyncio.sleep(SETTLE_S)
            if row["pass"]:
                break
        rows.append(row)
    return rows


def run(target: Target, objective: Objective, base: UserModel, prompts: list[str], start: int,
        max_users: int, precision: float, retries: int, out_dir: Path, processes: int = 1) -> dict:
    if not 1 <= start <= max_users <= MAX_USERS:
        raise CapacityError(f"Need 1 <= --start-users <= --max-users <= {MAX_USERS}.")
    if objective.ttft_p99_ms <= 0 or objective.tokens_per_s < 0 or not 0 <= precision < 1 or retries < 0:
        raise CapacityError("The objective must be positive, --precision in [0, 1) and --retries >= 0.")
    if processes > start:
        raise CapacityError(f"--processes {processes} is more than --start-users {start}: each "
                            "client process needs at least one user.")
    print(f"capacity through the {target.through} at {target.url}: steps of {base.window_s:g} s "
          f"(ramp {base.ramp_s:g} s), think {base.think_s:g} s"
          + (f", users from {processes} client processes" if processes > 1 else ""))
    print(render_table([]))
    rows = asyncio.run(search(target, objective, base, prompts, start, max_users, precision, retries,
                              out_dir, processes))
    result = {"kind": "ernie-chat capacity", "through": target.through, "url": target.url,
              "objective": {"ttft_p99_ms": objective.ttft_p99_ms,
                            "tokens_per_s": objective.tokens_per_s},
              "user_model": {"think_s": base.think_s, "ramp_s": base.ramp_s,
                             "window_s": base.window_s, "seed": base.seed},
              "client_processes": processes,
              "steps": rows, "users_within": bounds({r["users"]: r["pass"] for r in rows})[0],
              "answer": answer(rows, objective, max_users, target.through)}
    return result


def html_report(result: dict, out_dir: Path) -> Path:
    """report.html of a capacity.json: the users found first, then every step and the plot."""
    objective = result["objective"]
    page = Report(f"capacity through the {result['through']}", result["answer"],
                  result["users_within"] > 0, str(result.get("url", "")))
    model = result.get("user_model", {})
    page.facts("The search", [
        ("users within the objective", result["users_within"]),
        ("objective", f"TTFT p99 <= {objective['ttft_p99_ms']:g} ms and >= "
                      f"{objective['tokens_per_s']:g} tokens/s per user (p10)"),
        ("through", result["through"]), ("address", result.get("url")),
        ("think s", model.get("think_s")), ("ramp s", model.get("ramp_s")),
        ("step (send window) s", model.get("window_s")), ("seed", model.get("seed")),
        ("client processes", result.get("client_processes"))])
    fmt = lambda v, d=0: "-" if v is None else f"{v:.{d}f}"
    page.table("Every step", ["users", "TTFT p50 ms", "TTFT p99 ms", "tokens/s per user p10", "p50",
                              "replies/s", "errors", "tries", "result"],
               [[r["users"], fmt(r["ttft_ms_p50"]), fmt(r["ttft_ms_p99"]),
                 fmt(r["user_tokens_per_s_p10"], 1), fmt(r["user_tokens_per_s_p50"], 1),
                 fmt(r["replies_per_s"], 2), r["errors"], r.get("tries", 1),
                 "pass" if r["pass"] else f"FAIL: {r['why']}"]
                for r in sorted(result["steps"], key=lambda r: r["users"])])
    sampled = [(r["users"], r["cpu"]) for r in sorted(result["steps"], key=lambda r: r["users"]) if r.get("cpu")]
    if sampled:
        page.table("CPU by kind of process, every step", *cpu.table(sampled, "users"), note=cpu.TABLE_NOTE)
    page.images("Plot", [out_dir / "capacity.png"])
    return page.write(out_dir)


# --- the command line ---------------------------------------------------------------

def add_parser(sub) -> None:
    cap = sub.add_parser(
        "capacity", help="find how many chat users the machine serves within an objective",
        description="Steady-state runs of simulated users (arrive over --ramp-s, then send, read "
        "the whole reply, think, send again for --step-s), doubling the number of users, then "
        "bisecting, to find the most that stay within the objective. Prints a table, the "
        "answer, and writes capacity.json, capacity.png and report.html.")
    cap.add_argument("--through", choices=PATHS, default="app",
                     help="the app's websocket (as browsers) or the engine's OpenAI API directly")
    cap.add_argument("--url", help="default: the app or the engine of the settings")
    cap.add_argument("--api-key", help="--through engine: default ERNIE_API_KEY, else the key "
                     "`up` generated for an exposed engine")
    add_model_argument(cap, "--through app: the chat profile each chat opens with (the app's "
                       "model picker); --through engine: that model's engine")
    cap.add_argument("--objective-ttft-p99-ms", type=float, default=1000.0)
    cap.add_argument("--objective-tokens-per-s", type=float, default=20.0,
                     help="per-user decode rate that nine users in ten must see (default 20)")
    cap.add_argument("--start-users", type=int, default=8)
    cap.add_argument("--max-users", type=int, default=MAX_USERS)
    cap.add_argument("--precision", type=float, default=0.1,
                     help="stop bisecting when the bounds are this close, relative (default 0.1)")
    cap.add_argument("--step-s", type=float, default=60.0,
                     help="seconds of steady state per step, after the ramp (default 60)")
    cap.add_argument("--ramp-s", type=float, default=10.0)
    cap.add_argument("--think-s", type=float, default=5.0, help="mean pause after a reply (default 5)")
    cap.add_argument("--retries", type=int, default=1,
                     help="run a failing step again this many times; it fails if every try does "
                          "(default 1)")
    cap.add_argument("--reply-timeout-s", type=float, default=120.0)
    cap.add_argument("--output-len", type=int, help="--through engine: reply tokens "
                     "(default ERNIE_MAX_TOKENS, what the app asks for)")
    cap.add_argument("--prompts-file", type=Path, help="one prompt per line, used in turn")
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("--processes", type=int, default=1,
                     help="client processes sharing each step's users (default 1). One process "
                          "driving a thousand users adds to the times it reports, so its "
                          "ceilings are lower bounds: give 4 past ~500 users")
    cap.add_argument("--out", type=Path, help="results folder (default benchmarks/results/<time>/)")
    cap.set_defaults(func=cmd_capacity)


def cmd_capacity(args: argparse.Namespace) -> int:
    from server.settings import api_root, load_settings
    settings = load_settings()
    app = args.through == "app"
    url = args.url or (settings.app_url if app else served_model(settings, args.model).base_url)
    key = engine_key(settings, url, args.api_key)
    target = Target(args.through, api_root(url), key.value,
                    settings.system_prompt, args.output_len or settings.max_tokens,
                    settings.ignore_eos, settings.temperature, settings.top_p,
                    chat_profile=chat_profile(settings, args.model) if app else "",
                    api_key_from=key.source)
    base = UserModel(users=1, turns=0, think_s=args.think_s, ramp_s=args.ramp_s,
                     window_s=args.ramp_s + args.step_s, reply_timeout_s=args.reply_timeout_s,
                     seed=args.seed)
    out_dir = results_folder(args.out, "capacity-")
    result = run(target, Objective(args.objective_ttft_p99_ms, args.objective_tokens_per_s), base,
                 read_prompts(args.prompts_file), args.start_users, args.max_users, args.precision,
                 args.retries, out_dir, args.processes)
    print(result["answer"])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "capacity.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    from server.loadtest.lib import plots
    png = plots.capacity(result["steps"], result["objective"],
                         f"capacity through the {args.through}", out_dir / "capacity.png")
    print(f"wrote {path}\nwrote {png}\nwrote {html_report(result, out_dir)}", file=sys.stdout)
    return 0 if result["users_within"] > 0 else 1
