"""benchmarks/app-cost-cpu/profile_split.py: a worker's py-spy profile, split by part of a message."""

from __future__ import annotations

import gzip
import sys

from server.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "app-cost-cpu"))
import profile_split  # noqa: E402

LOOP = "run_forever (asyncio/base_events.py:607);_run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)"
HANDLER = f"{LOOP};process_message (chainlit/socket.py:311);on_message.<locals>.with_parent_id (chainlit/callbacks.py:161)"
PROFILE = "\n".join([
    f"{HANDLER};on_message (app/chat.py:207);answer (app/chat.py:244);stream_answer (app/chat.py:280);"
    "stream_reply (app/engine_client.py:152);AsyncCompletions.create (openai/x.py:1) 6",
    f"{HANDLER};on_message (app/chat.py:207);answer (app/chat.py:244);stream_answer (app/chat.py:280);"
    "stream_reply (app/engine_client.py:154);iter_lines (openai/_response.py:9) 3",
    f"{HANDLER};on_message (app/chat.py:207);answer (app/chat.py:246);offer (app/regenerate.py:22) 1",
    f"{HANDLER};Step.__aenter__ (chainlit/step.py:468) 2",
    f"{LOOP};AsyncSocket._websocket_handler.<locals>.writer (engineio/async_socket.py:212) 4",
    f"{LOOP};WebSocketsSansIOProtocol.run_asgi (uvicorn/x.py:409);AsyncServer._handle_eio_message (socketio/x.py:1) 2",
    f"{LOOP};WebSocketsSansIOProtocol.run_asgi (uvicorn/x.py:409);Router.__call__ (starlette/routing.py:7) 3",
    "run_forever (asyncio/base_events.py:607);_run_once (asyncio/base_events.py:1907);EpollSelector.select (selectors.py:468) 50",
    "not a profile line",
])


def test_each_sample_goes_to_its_part_and_the_waits_are_left_out():
    parts, whens, busy = profile_split.split(profile_split.samples(PROFILE))
    assert busy == 21  # the 50 samples of the loop's select are no work
    assert parts["the OpenAI client's request"] == 6
    assert parts["reading the reply's stream"] == 3 and parts["Regenerate's button"] == 1
    assert parts["Chainlit's message bookkeeping (task_start, the message, the run step)"] == 2
    assert parts["the websocket's writer (every emit)"] == 4
    assert parts["socket.io receiving the message"] == 2  # a message, not the ASGI app's other work
    assert parts["opening chats (HTTP requests, the websocket's handshake, on_chat_start)"] == 3
    assert (whens["before"], whens["after"], whens["opening"], whens["either"]) == (10, 4, 3, 4)


def test_a_gzipped_profile_reads_as_the_text_and_renders_shares(tmp_path, capsys):
    path = tmp_path / "worker.txt.gz"
    path.write_bytes(gzip.compress(PROFILE.encode()))
    assert profile_split.main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert "21 busy samples" in printed and " 28.6 %  the OpenAI client's request (before)" in printed
    assert "before: 47.6 %, after: 19.0 %, opening: 14.3 %, either: 19.0 %" in printed


def test_the_innermost_frames_package_counts_where_stacks_are_cut_short():
    profile = profile_split.samples(PROFILE)
    by_package = profile_split.packages(profile)
    # AsyncCompletions.create (openai/x.py), iter_lines (openai/_response.py): 9 samples
    assert by_package["openai"] == 9 and by_package["app"] == 1 and by_package["chainlit"] == 2
    assert by_package["engineio"] == 4 and by_package["socketio"] == 2 and by_package["starlette"] == 3
    assert "selectors.py" not in by_package  # the loop's waits are no work
    assert profile_split.package_of("Frame.serialize (websockets/frames.py:42)") == "websockets"
    assert profile_split.package_of("get_type_hints (typing.py:2245)") == "typing.py"
