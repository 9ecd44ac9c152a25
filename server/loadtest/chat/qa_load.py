"""``ernie-chat qa-load``: many chats at once through the app's own websocket.

``bench`` loads the engine; this loads the chat app the way browsers do, and
checks what a tester would check by eye in N browser tabs: every chat gets a
reply, the whole reply, and only its own.  No browser: each chat is a
socket.io client speaking Chainlit 2.12's protocol, as read in chainlit's
``socket.py``, ``emitter.py``, ``message.py`` and its frontend bundle:

* connect to ``/ws/socket.io`` with ``auth`` = sessionId (a fresh uuid4),
  clientType, threadId, userEnv (a JSON string) and chatProfile, then emit
  ``connection_successful``: that is what runs ``on_chat_start`` (our welcome);
* a user message is ``client_message`` with ``{"message": <step>, "fileReferences": []}``,
  the step carrying a uuid4 ``id``, ``type: user_message`` and the text in ``output``;
* the app answers ``task_start``; the reply's first text arrives in
  ``stream_start`` (the whole step, ``output`` = first chunk), the rest in
  ``stream_token`` ``{id, token}``; ``Message.send()`` at the end emits
  ``new_message`` with the same id and the final text, then ``task_end``.
  Opening a chat sends task events of its own: ``task_end`` for
  ``connection_successful``, then ``task_start`` ... ``task_end`` around
  ``on_chat_start``, and the welcome (the app sends it once on_chat_start is
  over, so that no message typed in between is lost).  A chat is open once both
  came, in either order (the welcome alone could still be followed by
  on_chat_start's ``task_end``, which would be taken for the end of our turn),
  and only a ``task_end`` after the ``task_start`` that follows our message ends
  the turn.

All chats connect and get their welcome first, then all send at once: the
replies are generated together, which is the load the check is about.  Each
prompt starts with a tag naming its run and chat, so text that reaches the
wrong chat can be recognised if the model echoes it; message ids seen by more
than one chat are the other sign of crossing.

TTFT here is what a user feels: from sending the message to the first reply
text on the socket, the app's work (token counting, history fitting, token
batching) included.  The load goes to the one URL given (default: the app of
the settings, which is on this machine) and is bounded by ``--sessions`` and
``--timeout-s``.

``--users N`` replaces the burst with users who arrive over a ramp and chat for
several turns with think time (``server.loadtest.users``).  Locust, which QA
testers know, was tried for that and not taken (benchmarks/locust-vs-qa-load.md):
its socket.io user is a gevent client, so the protocol above would be written a
second time beside the asyncio one the fault tests use, the lost/crossed/complete
checks and the TTFT and tokens/s figures would be custom events anyway (crossed
needs every chat's ids in one place, across distributed workers too), and it
adds gevent, flask and pyzmq to the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Awaitable, Callable, Optional

from server.loadtest.chat import processes as qa_processes
from server.loadtest.lib import chat_record, cpu
from server.loadtest.lib.chat_record import SessionRecord, count_crossed
from server.loadtest.lib.chat_socket import ChatSession, QaLoadError, check_app, read_prompts
from server.loadtest.lib.load_args import add_model_argument, chat_profile
from server.loadtest.lib.login import PASSWORD_ENV, chat_cookie_for
from server.loadtest.lib.stats import distribution_ms
from server.progress import StatusLine

# A typo (10000) must not open thousands of sockets from a tester's machine.
MAX_SESSIONS = 1000
# --- the figures (pure) -----------------------------------------------------------

def summarize_sessions(records: list[SessionRecord], wall_s: float) -> dict:
    """The run's verdict: ``ok`` only when every chat got its own complete reply."""
    replied = [r for r in records if r.replied]
    complete = [r for r in replied if r.complete]
    refused = [r for r in records if r.refused and not r.replied]  # answers, not failures
    errors = [r for r in records if r.error]
    reasons: dict[str, int] = {}
    for record in errors:
        reasons[record.error] = reasons.get(record.error, 0) + 1
    summary = {
        "sessions": len(records),
        "welcomed": sum(r.welcomed for r in records),
        "replied": len(replied),
        "complete": len(complete),
        "incomplete": len(replied) - len(complete),
        "limited": sum(r.refused == chat_record.LIMITED for r in refused),
        "busy_refused": sum(r.refused == chat_record.BUSY_REFUSED for r in refused),
        "busy_waited": sum(r.busy_waited for r in complete),
        "lost": len(records) - len(replied) - len(refused),
        "crossed": count_crossed(records),
        "errors": len(errors),
        "error_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "wall_s": wall_s,
        "open_ms": asdict(distribution_ms(r.open_s for r in records if r.open_s is not None)),
        "ttft_ms": asdict(distribution_ms(r.ttft_s for r in records if r.ttft_s is not None)),
        "total_ms": asdict(distribution_ms(r.total_s for r in replied if r.total_s is not None)),
    }
    summary["ok"] = bool(records) and all(
        summary[k] == 0 for k in ("incomplete", "lost", "crossed", "errors"))
    return summary


def progress_text(records: list[SessionRecord]) -> str:
    return (f"{len(records)} chats: {sum(r.welcomed for r in records)} open, "
            f"{sum(r.ttft_s is not None and not r.replied for r in records)} streaming, "
            f"{sum(r.replied for r in records)} replied, {sum(bool(r.error) for r in records)} errors")


# --- the whole run ------------------------------------------------------------------

def make_records(prompts: list[str], sessions: int) -> list[SessionRecord]:
    """One record per chat; prompts are used in turn, each behind its chat's tag."""
    run = secrets.token_hex(3)  # two runs at once never share a tag
    records = []
    for i in range(sessions):
        tag = f"[qa {run} s{i:03d}]"
        records.append(SessionRecord(i, tag, f"{tag} {prompts[i % len(prompts)]}"))
    return records


def check_sessions(sessions: int) -> None:
    if not 1 <= sessions <= MAX_SESSIONS:
        raise QaLoadError(f"--sessions must be between 1 and {MAX_SESSIONS}.")


async def run_load(url: str, prompts: list[str], sessions: int, timeout_s: float,
                   before_sending: Optional[Callable[[], Awaitable[None]]] = None,
                   cookie: str = "", chat_profile: str = "") -> dict:
    """Open ``sessions`` chats, then ask in all of them at once; the result of ``--json``.
    ``before_sending``: awaited once the chats are open (a client of ``--processes``);
    ``cookie``: the login every chat sends (``--login``); ``chat_profile``: the model (``--model``)."""
    check_sessions(sessions)
    if timeout_s <= 0 or not prompts:
        raise QaLoadError("--timeout-s must be positive and there must be at least one prompt.")
    url = url.rstrip("/")
    await check_app(url, logged_in=bool(cookie))
    records = make_records(prompts, sessions)
    chats = [ChatSession(record, chat_profile=chat_profile) for record in records]
    # On stderr: with --json, stdout is the result alone.
    status = StatusLine("qa-load", stream=sys.stderr, plain_every_s=5.0)

    async def tick() -> None:
        while True:
            status.update(progress_text(records))
            await asyncio.sleep(0.5)

    async def converse() -> None:
        headers = {"Cookie": cookie} if cookie else None
        opened = await asyncio.gather(*(chat.open(url, headers=headers) for chat in chats))
        if before_sending:
            await before_sending()
        await asyncio.gather(*(chat.ask() for chat, ok in zip(chats, opened) if ok))

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    try:
        await asyncio.wait_for(converse(), timeout_s)
    except asyncio.TimeoutError:
        for record in records:
            if not record.replied and not record.error:
                record.error = f"no reply within --timeout-s {timeout_s:g}"
    finally:
        wall_s = time.perf_counter() - started
        ticker.cancel()
        await asyncio.gather(ticker, *(chat.close() for chat in chats), return_exceptions=True)
    summary = summarize_sessions(records, wall_s)
    status.done(progress_text(records))
    return {"kind": "ernie-chat qa-load", "url": url, "summary": summary,
            "sessions": [r.as_dict() for r in records]}


def merge(results: list[dict], url: str) -> dict:
    """Several client processes' results as one run's (``--processes``): every chat numbered
    in turn and judged with all the others, the run as long as its longest client."""
    records = [SessionRecord.from_dict(chat) for result in results for chat in result["sessions"]]
    for index, record in enumerate(records):
        record.index = index
    summary = summarize_sessions(records, max(result["summary"]["wall_s"] for result in results))
    return {"kind": "ernie-chat qa-load", "url": url, "processes": len(results), "summary": summary,
            "sessions": [r.as_dict() for r in records]}


def streamed_tokens(result: dict) -> int:
    """Reply tokens of the complete replies, each as its figures line counted them."""
    return sum(c["reply_tokens"] or 0 for c in result["sessions"] if c["complete"])


# --- results ----------------------------------------------------------------------------

def render(result: dict) -> str:
    s = result["summary"]
    ms = lambda d, k: "-" if d[k] is None else f"{d[k]:.0f}"
    lines = [
        f"{s['sessions']} chats at {result['url']} in {s['wall_s']:.1f} s "
        f"(opening one: p50 {ms(s['open_ms'], 'median')} ms, p99 {ms(s['open_ms'], 'p99')} ms)",
        f"  opened {s['welcomed']}   complete replies {s['complete']}/{s['sessions']}   "
        f"lost {s['lost']}   crossed {s['crossed']}   incomplete {s['incomplete']}   "
        f"errors {s['errors']}",
        f"  answered instead of a reply: limited {s['limited']}   busy_refused {s['busy_refused']}"
        f"   (replies after a busy notice: {s['busy_waited']})",
        f"  TTFT ms  p50 {ms(s['ttft_ms'], 'median')}  p99 {ms(s['ttft_ms'], 'p99')}   "
        f"total ms  p50 {ms(s['total_ms'], 'median')}  p99 {ms(s['total_ms'], 'p99')}",
    ]
    lines += [f"  {n} x {reason}" for reason, n in s["error_reasons"].items()]
    if "cpu" in result:
        lines.append(cpu.render_run(result["cpu"]))
    lines.append("PASS" if s["ok"] else "FAIL")
    return "\n".join(lines)


# --- the command line -------------------------------------------------------------------

def add_parser(sub) -> None:
    qa = sub.add_parser(
        "qa-load", help="open many chats in the app at once and check every reply",
        description="Open N chats through the app's websocket (no browser), send a different "
        "prompt in each at once, and check that every chat gets its own reply, complete. "
        "Exit code 1 if any reply is lost, incomplete or crossed, or a chat failed.")
    qa.add_argument("--url", help="the chat app (default: ERNIE_APP_HOST/ERNIE_APP_PORT's)")
    qa.add_argument("--sessions", type=int, default=100,
                    help=f"chats opened at once (default 100, at most {MAX_SESSIONS})")
    qa.add_argument("--prompts-file", type=Path, help="one prompt per line, used in turn")
    qa.add_argument("--timeout-s", type=float, default=300.0,
                    help="give up on the whole run after this long (default 300)")
    qa.add_argument("--json", action="store_true", help="print the result, every chat included, as JSON")
    qa.add_argument("--processes", type=int, default=1,
                    help="client processes sharing the chats, which still send at once (default 1; "
                    "at ~1,000 chats one process adds to the TTFT it measures: use 4)")
    qa.add_argument("--login", metavar="NAME",
                    help=f"log in once as NAME (password in {PASSWORD_ENV}) and open every chat "
                    "with that login: for a stack with login (ERNIE_USERS)")
    qa.add_argument(qa_processes.GO_FLAG, action="store_true", help=argparse.SUPPRESS)
    add_model_argument(qa, "each chat opens with it as its chat profile (the app's model picker)")
    from server.loadtest.users import load as user_load
    user_load.add_user_arguments(qa)
    qa.set_defaults(func=cmd_qa_load)


def cmd_qa_load(args: argparse.Namespace) -> int:
    try:
        if args.arrival_rate is not None and args.users is None:
            raise QaLoadError("--arrival-rate spaces the arrivals of --users N: a burst (--sessions) "
                              "asks in every chat at once. Give --users.")
        from server.settings import load_settings
        settings = load_settings()
        url = (args.url or settings.app_url).rstrip("/")
        profile = chat_profile(settings, args.model)
        prompts = read_prompts(args.prompts_file)  # a bad file is refused before any process starts
        if args.users is None and args.processes != 1:
            check_sessions(args.sessions)
        # Before any chat opens or client process starts: a refused login stops the run here.
        cookie = asyncio.run(chat_cookie_for(url, args.login, os.environ, args.send_on_stdin))
        if args.users is not None:
            from server.loadtest.users import load as user_load
            return user_load.cmd_users(args, url, prompts, cookie, profile)
        # A client process of another run (--send-on-stdin) leaves the sampling to that run.
        with nullcontext({}) if args.send_on_stdin else cpu.sampled() as figures:
            if args.processes != 1:
                results = asyncio.run(qa_processes.run_processes(url, args.sessions, args.processes,
                                                                 args.timeout_s, args.prompts_file, cookie,
                                                                 args.model))
                result = merge(results, url)
            else:
                result = asyncio.run(run_load(url, prompts, args.sessions, args.timeout_s,
                                              qa_processes.wait_until_sent if args.send_on_stdin else None,
                                              cookie, profile))
        result["cpu"] = cpu.with_tokens(figures, streamed_tokens(result))
    except (QaLoadError, OSError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, ensure_ascii=False) if args.json else render(result))
    return 0 if result["summary"]["ok"] else 1
