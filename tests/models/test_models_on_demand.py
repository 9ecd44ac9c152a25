"""`up` with ERNIE_MODELS_AT_ONCE below the models: real vLLMs started on a chat's first request.

Three demo models, two at once: `up` starts two, the third is asleep; a chat of the third
(through the app's socket, as a browser tab, logged in: saved chats) is told it loads, gets its
reply once the model is loaded and warmed up, and the least recently used model stops while the
one in use keeps answering, though not before ERNIE_MODEL_MIN_LOADED_S after its start; idle
models stop after ERNIE_MODEL_IDLE_S; that saved chat reopened while its model sleeps opens
without asking the model anything, told that the model is not loaded, and its next message wakes
it, told how long its last start took; SIGTERM leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from typing import Callable

import httpx
import pytest

from server import model_wake
from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.loadtest.lib.login import PASSWORD_ENV, log_in
from server.stack.processes import free_port, port_free
from server.paths import ROOT
from tests.support.stack_process import Up, alive, descendants, serving

MODELS = ("demo", "demo-copy", "demo-small")
IDLE_S = 30
# Counted from `up`'s start of the first two; the chat of the third comes a few seconds later. The
# model it pushes out is marked used as that chat begins, so it is not stopped as idle before
# its minimum is over (IDLE_S after that mark).
MIN_LOADED_S = 20
USER, PASSWORD = "alice", "wonderland-4711"
ASLEEP = "ℹ️ **demo-small** is not loaded now: it starts with your first message."


@pytest.fixture(scope="module")
def on_demand(tmp_path_factory, demo_model):
    tmp = tmp_path_factory.mktemp("on-demand")
    other = tmp / "demo-copy"  # the same weights under another name: served as "demo-copy"
    shutil.copytree(demo_model, other)
    up = Up(tmp, ERNIE_MODELS=f"demo,{other},demo-small", ERNIE_MODELS_AT_ONCE="2",
            ERNIE_MODEL_IDLE_S=str(IDLE_S), ERNIE_MODEL_MIN_LOADED_S=str(MIN_LOADED_S),
            # A chat waits for its model's place and then its load: on busy cores a start of
            # the demo model took 241 s, past the default 180 s.
            ERNIE_CONTINUE_WAIT_S="300",
            ERNIE_ENGINE_PORT=str(free_port(len(MODELS))),
            ERNIE_KV_CACHE_GIB=None, ERNIE_MODEL=None,
            ERNIE_CHAT_DB=str(tmp / "chats.db"), ERNIE_USERS=f"{USER}:{PASSWORD}")
    up.engine_port = int(up.env["ERNIE_ENGINE_PORT"])
    up.threads = {}  # served name -> a saved chat of that model
    up.settings = up.settings.model_copy(update={"models": up.env["ERNIE_MODELS"]})
    yield from serving(up)


def port(up: Up, served: str) -> int:
    return up.engine_port + MODELS.index(served)


def state(up: Up, served: str) -> dict:
    return json.loads(up.settings.log_file.with_name(f"engine-state-{served}.json").read_text())


def vllms(up: Up) -> set[str]:
    """The served names of the vLLM API servers running under the supervisor."""
    found = set()
    for pid in descendants(up.proc.pid):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--served-model-name" in argv:
            found.add(argv[argv.index(b"--served-model-name") + 1].decode())
    return found


def answers(up: Up, served: str) -> bool:
    reply = httpx.post(f"http://127.0.0.1:{port(up, served)}/v1/chat/completions", timeout=60, json={
        "model": served, "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]})
    return reply.status_code == 200


def test_up_starts_two_and_the_third_sleeps(on_demand):
    up = on_demand
    assert vllms(up) == {"demo", "demo-copy"}
    assert answers(up, "demo") and answers(up, "demo-copy")
    assert port_free("127.0.0.1", port(up, "demo-small"))
    assert [state(up, name)["state"] for name in MODELS] == ["ready", "ready", "asleep"]
    assert state(up, "demo")["load_s"] > 0
    assert any("[on demand] demo-small: started on a chat's first request" in line for line in up.lines)
    assert f"Engine: http://127.0.0.1:{port(up, 'demo-small')} serves demo-small (on demand)" in up.lines
    assert any(line.startswith("[models] ") and "demo-small on port" in line and line.endswith("on demand")
               for line in up.lines), up.output()
    cli = [sys.executable, "-m", "server.cli"]
    status = subprocess.run([*cli, "status"], cwd=ROOT, env=up.env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "demo-small  asleep: started on demand" in status.stdout, status.stdout
    doctor = subprocess.run([*cli, "doctor"], cwd=ROOT, env=up.env, capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "llm-demo-small.log yet: its model is asleep: started on demand" in doctor.stdout, doctor.stdout


async def chat_with(up: Up, profile: str, prompt: str, thread_id: str = "",
                    when_open: Callable[[list], None] = lambda seen: None,
                    ) -> tuple[SessionRecord, list[tuple[str, str]]]:
    """A chat of ``profile`` (or the saved chat ``thread_id`` reopened) that sends ``prompt``:
    its record and every message the app sent (kind, text); ``when_open`` sees those sent
    before the prompt."""
    cookie = await log_in(up.url, USER, {PASSWORD_ENV: PASSWORD})
    chat = ChatSession(SessionRecord(index=0, tag="", prompt=""), chat_profile=profile)
    seen = []
    handle = chat._on_event

    def on_event(event: str, data=None) -> None:
        if event == "new_message" and isinstance(data, dict):
            seen.append(((data.get("metadata") or {}).get("kind"), data.get("output") or ""))
        handle(event, data)
    chat.sio.on("*", on_event)
    assert await chat.open(up.url, headers={"Cookie": cookie}, thread_id=thread_id), chat.record.error
    # What the chat sends after it opens, up to its last notice: a new chat's welcome, or the
    # model's notice of a reopened one (after its saved steps, 1 s late).
    deadline = time.monotonic() + 60
    while not any(kind in ("welcome", "model_asleep") for kind, _ in seen):
        assert time.monotonic() < deadline, f"the chat did not finish opening: {seen}"
        await asyncio.sleep(0.1)
    when_open(list(seen))
    chat.next_turn(prompt)
    await asyncio.wait_for(chat.ask(), 400)
    await chat.close()
    return chat.record, seen


def test_a_chat_of_the_asleep_model_loads_it_and_the_least_recently_used_stops(on_demand):
    up = on_demand
    failures, done = [], threading.Event()

    def keep_using_demo_copy():
        # A chat on demo-copy meanwhile: used (as the app marks it), so not the one to stop.
        while not done.is_set():
            model_wake.mark_used(up.settings, "demo-copy")
            if not answers(up, "demo-copy"):
                failures.append(time.monotonic())
            done.wait(2)
    user = threading.Thread(target=keep_using_demo_copy)
    # The attack too: demo, the least recently used, is asked to make room; before the minimum
    # it was not pushed out.
    began = up.read_at[up.wait_for(r"^\[start-up\] ")]  # just after the models' minimum began
    model_wake.mark_used(up.settings, "demo")  # before demo-copy's marks: still the least recent
    asked = time.time()  # the chat's message goes out a few seconds later
    user.start()
    try:
        record, seen = asyncio.run(chat_with(up, "demo-small", "hello there"))
    finally:
        done.set()
        user.join()
    up.threads["demo-small"] = record.thread_id
    # Its welcome says the model is not loaded; nothing is asked of its engine before the message.
    assert ("welcome", ASLEEP) in seen
    assert ("model_loading", "⏳ Loading **demo-small** … (first start); the reply follows once it "
            "is loaded.") in seen, seen
    assert record.final and not record.error, (record, up.output())
    assert not failures, "demo-copy stopped answering while demo-small loaded"
    assert vllms(up) == {"demo-copy", "demo-small"}
    assert port_free("127.0.0.1", port(up, "demo"))
    assert state(up, "demo")["state"] == "asleep" and state(up, "demo")["load_s"] > 0  # kept for the chat
    assert state(up, "demo-small")["state"] == "ready" and state(up, "demo-small")["load_s"] > 0
    stopped = up.wait_for(r"^\[on demand\] stopping demo: making room for demo-small \(least recently used\)")
    assert up.read_at[stopped] >= began + MIN_LOADED_S - 2, (up.read_at[stopped] - began, up.output())
    if asked + 10 < began + MIN_LOADED_S:  # asked well within it: it waited, saying why
        waits = up.wait_for(r"^\[on demand\] demo-small waits: each model that runs was started or woken "
                            rf"less than {MIN_LOADED_S} s ago .*\(ERNIE_MODEL_MIN_LOADED_S\)")
        assert waits < stopped
    print(f"demo-small asked {asked - began:.1f} s after demo's start, demo stopped for it "
          f"{up.read_at[stopped] - began:.1f} s after (ERNIE_MODEL_MIN_LOADED_S={MIN_LOADED_S})")
    assert not any(line.startswith("[engine demo] exited") for line in up.lines), up.output()
    # Warmed up as `up` warms the models it starts first.
    started = up.wait_for(r"^\[on demand\] starting demo-small")
    warmed = up.wait_for(r"^\[warm-up\] ", after=started, timeout_s=60)
    print(f"demo-small woken: loaded in {state(up, 'demo-small')['load_s']} s, then {up.lines[warmed]}; "
          f"the chat's reply came {record.total_s:.1f} s after its message")


def test_idle_models_stop(on_demand):
    up = on_demand
    deadline = time.monotonic() + IDLE_S + 60
    while vllms(up) and time.monotonic() < deadline:
        time.sleep(2)
    assert not vllms(up), up.output()
    assert [state(up, name)["state"] for name in MODELS] == ["asleep"] * 3
    assert any(f"no request for {IDLE_S} s (ERNIE_MODEL_IDLE_S)" in line for line in up.lines)
    assert up.proc.poll() is None and httpx.get(up.url, timeout=10).status_code == 200


def test_a_saved_chat_reopened_while_its_model_sleeps_opens_and_its_message_wakes_it(on_demand):
    up = on_demand
    took = state(up, "demo-small")["load_s"]  # its start above, kept while it sleeps
    used = model_wake.last_used(up.settings, "demo-small")

    def asleep_and_unasked(seen: list) -> None:
        assert not [shown for shown in seen if shown[0] == "error"], seen
        assert ("model_asleep", ASLEEP) in seen, seen  # after the saved steps, before the message
        assert state(up, "demo-small")["state"] == "asleep" and not vllms(up)
        assert model_wake.last_used(up.settings, "demo-small") == used  # opening wakes nothing
    record, seen = asyncio.run(chat_with(up, "", "hello again", thread_id=up.threads["demo-small"],
                                         when_open=asleep_and_unasked))
    assert record.resumed, record
    assert ("model_loading", f"⏳ Loading **demo-small** … (took {took:.0f} s last time); the reply "
            "follows once it is loaded.") in seen, seen
    assert record.final and not record.error, (record, up.output())
    assert state(up, "demo-small")["state"] == "ready"
    assert vllms(up) == {"demo-small"}


def test_sigterm_leaves_no_vllm(on_demand):
    up = on_demand
    model_wake.mark_used(up.settings, "demo")  # one starting as `up` stops
    up.wait_for(r"^\[on demand\] starting demo", timeout_s=30)
    tree = descendants(up.proc.pid)
    up.stop()
    assert up.proc.returncode == 0, up.output()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "processes left behind after SIGTERM"
    assert all(port_free("127.0.0.1", port(up, name)) for name in MODELS)
    assert [state(up, name)["state"] for name in MODELS] == ["stopped"] * 3
