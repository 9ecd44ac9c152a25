"""`ernie-chat qa-load` against the real app (Chainlit, the session's CPU vLLM, demo model):
100 real chats at once, through its websocket."""

from __future__ import annotations

import json
from pathlib import Path


from server import cli
from server.loadtest.chat import qa_load
from server.loadtest.lib import chat_socket
from server.usage_log import read_usage
QA_SESSIONS = 100
# Well under the suite's patience: the run takes 8-18 s here, depending on the other load.
QA_TIMEOUT_S = 110


def engine_requests(log: Path) -> dict[str, int]:
    """The app's questions to vLLM so far, from its access log (one line per request)."""
    text = log.read_text(errors="replace")
    return {path: text.count(f'"{method} {path} ') for method, path in
            (("GET", "/v1/models"), ("POST", "/tokenize"), ("POST", "/v1/chat/completions"))}


async def test_hundred_chats_at_once_each_get_their_own_complete_reply(engine, short_replies_app):
    log = Path(engine[0].log_file)
    before = engine_requests(log)
    usage = short_replies_app.usage_log
    logged = len(read_usage(usage)[0]) if usage.exists() else 0
    result = await qa_load.run_load(short_replies_app.app_url, list(chat_socket.DEFAULT_PROMPTS),
                                    QA_SESSIONS, QA_TIMEOUT_S)
    asked = {path: n - before[path] for path, n in engine_requests(log).items()}
    # One probe for the process's chats and one measurement of the template
    # (app/engine/single_flight.py), short first messages bounded, not counted (prompt_budget).
    # Each chat asking for itself made 100 /v1/models and 200-300 /tokenize here.
    assert asked["/v1/chat/completions"] >= QA_SESSIONS, asked
    assert asked["/v1/models"] <= 2 and asked["/tokenize"] <= 3, asked
    s = result["summary"]
    print("\n" + qa_load.render(result))
    assert s["error_reasons"] == {}
    assert (s["lost"], s["crossed"], s["incomplete"]) == (0, 0, 0)
    assert s["complete"] == s["welcomed"] == QA_SESSIONS and s["ok"]
    chats = result["sessions"]
    assert len({c["reply_id"] for c in chats}) == QA_SESSIONS
    assert all(c["ttft_s"] < c["total_s"] for c in chats)
    # The app's usage log and qa-load stamp one clock (benchmarks/gpu/burst_table.py's timeline):
    # each message reached the handler, was asked of vLLM and got its first token in that order,
    # between the first chat's send and the last chat's reply.
    stamps = [r["at"] for r in read_usage(usage)[0][logged:]]
    first_sent, last_reply = min(c["sent_at"] for c in chats), max(c["sent_at"] + c["total_s"] for c in chats)
    assert len(stamps) == QA_SESSIONS
    assert all(first_sent < s["message"] <= s["request"] < s["first_token"] < last_reply for s in stamps), stamps[:3]


def test_chats_from_two_client_processes_send_together_and_are_merged(short_replies_app, capsys):
    code = cli.main(["qa-load", "--url", short_replies_app.app_url, "--sessions", "6",
                     "--processes", "2", "--timeout-s", "90", "--json"])
    result = json.loads(capsys.readouterr().out)
    s = result["summary"]
    assert code == 0 and result["processes"] == 2 and (s["complete"], s["crossed"]) == (6, 0), s
    runs = {c["tag"].split()[1] for c in result["sessions"]}   # each process tags its own run
    assert len(runs) == 2 and len({c["reply_id"] for c in result["sessions"]}) == 6
    # The machine's CPU by kind of process, sampled once for the run (not by each client).
    cpu = result["cpu"]
    assert cpu["busy_cores"]["app workers"] > 0 and cpu["busy_cores"]["load clients"] > 0, cpu
    assert cpu["tokens"] == sum(c["reply_tokens"] for c in result["sessions"])
    assert cpu["cpu_s_per_1k_tokens"]["app workers"] > 0


def test_an_app_that_requires_login_is_refused_with_the_reason(saved_chats_app, capsys):
    assert cli.main(["qa-load", "--url", saved_chats_app.app_url, "--sessions", "2"]) == 2
    assert "requires login" in capsys.readouterr().err


def test_cli_json_with_a_prompts_file(short_replies_app, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Say hello.\n你好吗？\n", encoding="utf-8")
    code = cli.main(["qa-load", "--url", short_replies_app.app_url, "--sessions", "4",
                     "--prompts-file", str(prompts), "--timeout-s", "60", "--json"])
    result = json.loads(capsys.readouterr().out)  # progress goes to stderr: stdout is JSON
    assert code == 0 and result["summary"]["complete"] == 4
    assert [c["prompt"].split("] ", 1)[1] for c in result["sessions"]] == [
        "Say hello.", "你好吗？", "Say hello.", "你好吗？"]
