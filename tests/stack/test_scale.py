"""The stack at scale, for real and in small numbers: `ernie-chat up` with two engine copies
of two API servers each, two app workers, HAProxy in front of both tiers, and saved chats on
a real PostgreSQL server that this module starts itself.

What a crowd needs from it: the processes asked for really run (counted), requests and
chats spread over the copies and the workers, two workers writing at once lose nothing,
an engine copy that dies costs no chat (its replies go on on the other copy), and a worker
that dies costs only its own chats, which get a clear message and carry on, while the
supervisor brings the process back.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from app.conversation import in_flight
from server import chat_db
from server.loadtest.lib import kills
from server.loadtest.lib.chat_record import FIGURES_TAIL, SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.paths import ROOT
from server.stack.engine_args import cpu_share, one_thread_per_core
from tests.support import postgres
from tests.support.metrics import metric_async
from tests.support.stack_process import Up, descendants, serving
from tests.support.chat import PASSWORD, chats, login_cookie, page_of_worker, replies_of, run, until, USER

# Tokens: long enough that a fault lands mid-reply, with each engine copy on a core of its
# own (a reply of 1,500 took about 6 s there); the window holds a chat's second turn.
LONG_REPLY = 3000
# A copy killed as soon as every chat streams lands mid-reply of CRASH_REPLY tokens: two or
# more streams share each copy's core then (about 150 tokens a second each), and every reply
# that was on it goes on on the other copy, which then carries them all.
CRASH_REPLY = 1000
# Where no fault must land mid-reply, each chat asks for short replies (its settings panel): six
# chats of LONG_REPLY tokens took 95 s of a run, a rolling restart's drains waited for them.
SHORT_REPLY = 64


@pytest.fixture(scope="module")
def stack(tmp_path_factory, database):
    yield from serving(Up(
        tmp_path_factory.mktemp("scale"), ERNIE_ENGINE_COPIES="2", ERNIE_API_SERVERS="2",
        ERNIE_APP_WORKERS="2", ERNIE_KV_CACHE_GIB="0.5", ERNIE_MAX_MODEL_LEN="8192",
        ERNIE_CHAT_DB=database, ERNIE_USERS=f"{USER}:{PASSWORD}", ERNIE_IGNORE_EOS="true",
        ERNIE_MAX_TOKENS=str(LONG_REPLY), ERNIE_REQUEST_TIMEOUT_S="20",
        # The GPU's default: API servers forked (server/stack/vllm_serve.py); the metrics
        # these tests read must still add up over them.
        ERNIE_ENGINE_PROCESS_START="fork"))


def titles(pids) -> list[str]:
    """Process titles (vLLM names its processes VLLM::APIServer_0 ...) and command lines."""
    found = []
    for pid in pids:
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def copy_urls(stack: Up) -> list[str]:
    """Where each engine copy listens, from the supervisor's own lines."""
    return [re.search(r"ready at (\S+)", line).group(1) for line in stack.lines
            if re.match(r"\[engine \d\] vLLM ready at", line)][:2]


def connections_to(port: int) -> int:
    """Established TCP connections to a local port, from /proc/net/tcp (who talks to whom)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "01" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def test_the_processes_asked_for_really_run(stack):
    output = "\n".join(stack.lines)
    assert "[stack] 2 engine copies x 2 API servers, 2 app workers, HAProxy" in output
    assert len([l for l in stack.lines if "2 API server processes (as asked" in l]) == 2, output
    assert re.search(r"\[warm-up\] \d+ requests like the app's .* to 2 engine copies", output), output
    # HAProxy started while the engine loaded: no start-up lap of its own.
    laps = next(line for line in stack.lines if line.startswith("[start-up]"))
    assert "engine (the app and HAProxy loading meanwhile)" in laps and "balancer" not in laps, laps
    engine_log = stack.settings.log_file.read_text()
    assert "[vllm_serve] 2 API server processes forked" in engine_log
    running = titles(descendants(stack.proc.pid))
    assert len([t for t in running if t.startswith("VLLM::APIServer_")]) == 4, running
    assert len([t for t in running if t.startswith("VLLM::EngineCore")]) == 2, running
    assert len([t for t in running if "haproxy" in t]) == 1
    assert len([t for t in running if "app.serve run" in t]) == 2
    # Each copy's threads on cores of its own, as vLLM itself reports the binding it used.
    shares = [cpu_share(one_thread_per_core(os.sched_getaffinity(0)), i, 2) for i in range(2)]
    if all(shares):
        assert f"[engine] each copy computes on cores of its own: copy 0 on {shares[0]}; " \
               f"copy 1 on {shares[1]}" in output, output
        for log, share in zip((stack.settings.log_file, stack.settings.log_file.with_name("llm-copy1.log")), shares):
            assert f"VLLM_CPU_OMP_THREADS_BIND='{share}'" in log.read_text(), log


def test_requests_through_the_balancer_reach_both_engine_copies(stack):
    def served() -> list[float]:
        from tests.support.metrics import metric
        return [metric(u, "vllm:request_success_total") for u in copy_urls(stack)]
    before = served()
    engine = f"http://127.0.0.1:{stack.engine_port}"

    async def many():
        async with httpx.AsyncClient(timeout=120) as http:
            body = {"model": "ernie-4.5-0.3b", "prompt": "Hello", "max_tokens": 32, "ignore_eos": True}
            answers = await asyncio.gather(*(http.post(f"{engine}/v1/completions", json=body)
                                             for _ in range(8)))
            assert all(a.status_code == 200 for a in answers)
    run(many())
    gained = [after - b for after, b in zip(served(), before)]
    assert sum(gained) == 8 and all(g > 0 for g in gained), gained


def test_chats_spread_over_both_workers_and_postgres_keeps_every_one(stack, database):
    cookie = login_cookie(stack.url)
    prompts = [f"Tell me story number {i}." for i in range(6)]

    async def go():
        sessions = await chats(stack.url, cookie, prompts, reply_tokens=SHORT_REPLY)
        worker_ports = [int(p) for p in re.findall(r"\[app(?: \d)?\] Chainlit ready at http://127.0.0.1:(\d+)",
                                                    "\n".join(stack.lines))]
        spread = [connections_to(p) for p in worker_ports]
        await asyncio.gather(*(s.ask() for s in sessions))
        for s in sessions:
            await s.close()
        return sessions, spread
    sessions, spread = run(go())
    assert all(s.record.complete for s in sessions), [s.record.error for s in sessions]
    assert len(spread) == 2 and all(n >= 2 for n in spread), spread  # both workers had chats

    deadline = time.monotonic() + 30          # Chainlit writes in background tasks
    while True:
        rows = postgres.fetch(database, 'SELECT s."threadId", s."type", s."output" FROM steps s JOIN '
                              'threads t ON t."id" = s."threadId" WHERE t."userIdentifier" = $1', USER)
        asked = {r["output"] for r in rows if r["type"] == "user_message"}
        replies = [r for r in rows if r["type"] == "assistant_message" and "tok/s" in (r["output"] or "")]
        if set(prompts) <= asked and len(replies) >= len(prompts) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert set(prompts) <= asked, asked
    streamed = {s.record.final for s in sessions}
    assert streamed <= {r["output"] for r in replies}           # each reply saved as it was shown


async def started_and_finished(url: str) -> tuple[float, float]:
    """Requests a copy has begun answering (first token) and finished, from counters that its
    API servers sum (its running gauge is only the most recent API server's view)."""
    return (await metric_async(url, "vllm:time_to_first_token_seconds_count"),
            await metric_async(url, "vllm:request_success_total"))


def test_a_dead_engine_copy_costs_no_chat_its_replies_go_on_on_the_other(stack):
    """Kill a copy while chats stream on both: no reply is lost or fails. Those on the dead
    copy go on on the other from the text shown, as one reply whose figures say so and
    count every token; a message sent right after the kill is answered; the supervisor
    brings the copy back."""
    cookie = login_cookie(stack.url)
    mark = len(stack.lines)

    async def go():
        urls = copy_urls(stack)
        before = [await started_and_finished(url) for url in urls]
        sessions, asking = [], []
        for _ in range(3):
            more = await chats(stack.url, cookie, [f"Long story {len(sessions) + i}." for i in range(4)],
                               reply_tokens=CRASH_REPLY)
            sessions += more
            asking += [asyncio.create_task(s.ask()) for s in more]
            await asyncio.sleep(0)
            while not all(s.record.ttft_s or s.record.error for s in sessions):   # every reply streams
                await asyncio.sleep(0.2)
            assert not any(s.record.error for s in sessions), [s.record.error for s in sessions]
            now = [await started_and_finished(url) for url in urls]
            streaming = [(n[0] - b[0]) - (n[1] - b[1]) for n, b in zip(now, before)]
            if all(streaming):
                break
        victim = max(range(len(urls)), key=lambda i: streaming[i])
        pid = next(p for p in descendants(stack.proc.pid)
                   if f"--port {urls[victim].rsplit(':', 1)[1]}" in " ".join(titles([p])))
        os.killpg(pid, signal.SIGKILL)
        later = await chats(stack.url, cookie, ["A short story after the crash."], reply_tokens=SHORT_REPLY)
        await later[0].ask()
        await asyncio.gather(*asking)
        for s in sessions + later:
            await s.close()
        return sessions, later[0], victim, streaming
    sessions, later, victim, streaming = run(go())
    records = [s.record for s in sessions]
    assert all(r.complete for r in records), [r.error or (r.final or "")[-200:] for r in records]
    continued = [r for r in records if r.continued]
    assert 1 <= len(continued) <= streaming[victim], f"{len(continued)} continued, streams: {streaming}"
    assert {r.reply_tokens for r in records} == {CRASH_REPLY}  # the parts of a continued reply add up
    assert later.record.complete, later.record.error
    stack.wait_for(rf"\[engine {victim}\] restarting in", after=mark, timeout_s=120)
    stack.wait_for(rf"\[engine {victim}\] vLLM ready", after=mark, timeout_s=900)


def test_a_dead_worker_moves_its_chats_which_carry_on_with_their_history(stack, database):
    """Kill worker 1 while its chat's reply streams: the chat on worker 0 goes on untouched;
    the one on worker 1 reconnects as its browser would (its session id, cookies and thread),
    is told that it lost its process, and sees its reply finish, carried on by worker 0 from
    the text saved while it streamed (app/conversation/in_flight.py); the saved chat holds the reply whole,
    and the chat carries on with its history."""
    login = login_cookie(stack.url)
    browsers = [page_of_worker(stack.url, w, login) for w in (0, 1)]
    mark = len(stack.lines)

    async def go():
        sessions = [ChatSession(SessionRecord(i, "", f"Question {i}."), reconnect=True) for i in (0, 1)]
        for session, cookies in zip(sessions, browsers):
            assert await asyncio.wait_for(session.open(stack.url, headers={"Cookie": cookies}), 120)
        await replies_of(sessions[0], SHORT_REPLY)  # only the reply on the killed worker runs long
        await asyncio.wait_for(sessions[0].ask(), 600)
        asking = asyncio.create_task(sessions[1].ask())
        await until(lambda: sessions[1].record.streamed, 300)
        await asyncio.sleep(2.5 * in_flight.SAVE_EVERY_S)  # some of it saved, more to come
        # Found as `qa-load --kill worker:1@...` finds it, from the chat port.
        victim = kills.find(kills.parse_kill("worker:1@0"), urlsplit(stack.url).port)
        os.killpg(victim.pid, signal.SIGKILL)
        shown_when_killed = sessions[1].record.streamed
        await asyncio.wait_for(asking, 600)
        continued = copy.copy(sessions[1].record)
        saved = await saved_reply(database, continued.reply_id)
        await replies_of(sessions[1], SHORT_REPLY)  # the history is what the next turns are about
        for session, prompt in zip(sessions, ("Question 2.", "Question 3.")):
            session.next_turn(prompt)
            await asyncio.wait_for(session.ask(), 600)
            await session.close()
        return continued, shown_when_killed, saved, sessions
    continued, shown_when_killed, saved, (kept, moved) = run(go())
    assert continued.outcome == "continued" and continued.moved, continued.error
    # Carried on from the text saved up to a second before the kill, not started again.
    assert continued.final.startswith(shown_when_killed[:20]) and len(continued.streamed) > len(shown_when_killed)
    assert saved == (continued.final, None)
    assert moved.record.complete and kept.record.complete and not kept.record.moved
    assert not kept.record.reconnects
    stack.wait_for(r"\[app 1\] restarting in", after=mark, timeout_s=120)


async def saved_reply(database: str, step_id: str) -> tuple[str, object]:
    """The reply as the saved chat holds it, and its in-flight marker (None once finished),
    once Chainlit's own save of the finished message has landed."""
    db = await asyncpg.connect(chat_db.plain_postgres_url(database))
    try:
        for _ in range(100):
            row = await db.fetchrow('SELECT "output", "metadata" FROM steps WHERE "id" = $1', step_id)
            found = (row["output"], in_flight.marker_of(row["metadata"])) if row else None
            if found and FIGURES_TAIL.search(found[0] or ""):
                return found
            await asyncio.sleep(0.1)
        return found
    finally:
        await db.close()


def test_a_rolling_restart_under_load_fails_no_message_and_applies_the_new_setting(stack):
    """`ernie-chat restart` (the real command) with ERNIE_STREAM_INTERVAL changed while two chats,
    one pinned to each worker, go on asking: every copy and worker is drained, restarted and put
    back one at a time, every reply completes, the chats of a drained worker move between
    replies (reconnecting as a browser does), and the new processes run the new setting.
    The load is bounded (two chats, a pause between replies): on 2 cores a restarted copy
    must still find the CPU to start within vLLM's own engine start-up timeout. The setting
    changed is one that leaves the compiled model as it was, so each copy's start reuses the
    compile cache instead of compiling for minutes on cores busy with the other copy."""
    login = login_cookie(stack.url)
    browsers = [page_of_worker(stack.url, i, login) for i in range(2)]
    mark, began = len(stack.lines), time.monotonic()
    restart = subprocess.Popen([sys.executable, "-m", "server.cli", "restart"], cwd=ROOT,
                               env={**stack.env, "ERNIE_STREAM_INTERVAL": "2"}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    async def user(i: int, cookies: str) -> tuple[list[tuple[bool, str, float]], int]:
        session, turns, moves = ChatSession(SessionRecord(i, "", "")), [], 0
        assert await asyncio.wait_for(session.open(stack.url, headers={"Cookie": cookies}), 120)
        await replies_of(session, SHORT_REPLY)
        while restart.poll() is None:
            session.next_turn(f"Chat {i}, question {len(turns)}.")
            await asyncio.wait_for(session.ask(), 600)
            turns.append((session.record.complete, session.record.error,
                          round(time.monotonic() - began, 1)))
            await asyncio.sleep(3)  # the user reads; a drained worker closes the socket meanwhile
            if not session.sio.connected:
                session, moves = await reopen(session, cookies), moves + 1
        await session.close()
        return turns, moves

    async def reopen(session: ChatSession, cookies: str) -> ChatSession:
        """Open the chat again as a browser's socket.io client does: a socket that lands on a
        worker in the instant before it leaves rotation is closed by its drain before the
        chat opens, and the browser reconnects once more, to the other worker."""
        errors = []
        for _ in range(3):
            thread = session.record.thread_id
            await session.close()
            session = ChatSession(SessionRecord(session.record.index, "", ""))
            if await asyncio.wait_for(session.open(stack.url, headers={"Cookie": cookies},
                                                   thread_id=thread), 120):
                return session
            errors.append(session.record.error)
            session.record.thread_id = thread
            await asyncio.sleep(1)
        raise AssertionError(f"the chat did not open again: {errors}\n" + "\n".join(stack.lines[mark:]))

    async def go():
        return await asyncio.gather(*(user(i, cookies) for i, cookies in enumerate(browsers)))
    try:
        results = run(go())
    finally:  # a failed chat leaves the restart running: the next tests need it over
        output = restart.communicate(timeout=900)[0]
    assert restart.returncode == 0, output
    assert "[restart] changed: ERNIE_STREAM_INTERVAL" in output and "[restart] done" in output, output
    for step in ("engine 0", "engine 1", "app", "app 1"):
        assert f"[restart] {step}: back in rotation\n" in output, output  # HAProxy saw it UP
    turns = [turn for chat_turns, _ in results for turn in chat_turns]
    # A failure names the turns that did not complete, with their error and the seconds since
    # the restart began, and prints the restart's steps.
    assert len(turns) >= 6 and all(complete for complete, _, _ in turns), \
        f"{[t for t in turns if not t[0]]} of {len(turns)} turns\n{output}"
    assert sum(moves for _, moves in results) >= 2, results  # both workers' chats moved
    supervised = "\n".join(stack.lines[mark:])
    assert "restarting in" not in supervised and "exited with code" not in supervised, supervised
    running = descendants(stack.proc.pid)
    engines = [t for t in titles(running) if "--max-model-len" in t]
    assert len(engines) == 2 and all("--stream-interval 2" in t for t in engines), engines
    workers = [p for p in running if "app.serve run" in " ".join(titles([p]))]
    assert len(workers) == 2 and all(b"ERNIE_STREAM_INTERVAL=2" in Path(f"/proc/{p}/environ").read_bytes()
                                     for p in workers)


def test_a_second_restart_while_one_runs_is_refused(stack, tmp_path):
    """The request file marks a restart as running: a second command is refused at once."""
    from server.stack import restart_control
    folder = restart_control.run_folder(stack.settings)
    assert restart_control.claim(folder, None)
    try:
        again = subprocess.run([sys.executable, "-m", "server.cli", "restart"], cwd=ROOT, env=stack.env,
                               capture_output=True, text=True, timeout=60)
    finally:
        restart_control.request_file(folder).unlink()
    assert again.returncode == 2 and "A restart is already running" in again.stderr, again.stderr
