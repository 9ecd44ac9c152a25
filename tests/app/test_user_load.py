"""Users, not bursts, against the REAL app and engine (CPU vLLM, demo model); and capacity.

Small numbers, so each run takes seconds on 2 cores: what is checked is the
accounting (every message answered, whole, in its own chat), the files a QA tester
reads, and that the capacity search finds a number consistent with its own table.
"""

from __future__ import annotations

import csv
import json

import pytest

from server import cli
from server.loadtest.lib.chat_socket import DEFAULT_PROMPTS
from server.loadtest.users import capacity
from server.loadtest.users.chats import Target
from server.loadtest.users.load import run_user_load
from server.loadtest.users.model import UserModel
from tests.support.settings import QA_MAX_TOKENS


def test_users_chat_several_turns_through_the_app(short_replies_app, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "users"
    code = cli.main(["qa-load", "--url", short_replies_app.app_url, "--users", "12", "--turns", "3",
                     "--think-s", "0.5", "--ramp-s", "2", "--reply-timeout-s", "90", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "PASS" in printed.out and "users" in printed.err  # the live line goes to stderr
    result = json.loads((out / "summary.json").read_text())
    s = result["summary"]
    assert (s["users"], s["opened"], s["messages"], s["complete"]) == (12, 12, 36, 36)
    assert (s["lost"], s["crossed"], s["incomplete"], s["errors"]) == (0, 0, 0, 0)
    replies = list(csv.DictReader(open(out / "replies.csv", encoding="utf-8")))
    assert len(replies) == 36 and {r["tokens"] for r in replies} == {str(QA_MAX_TOKENS)}
    assert sorted({(r["user"], r["turn"]) for r in replies}) == sorted(
        {(str(u), str(t)) for u in range(12) for t in range(3)})
    seconds = list(csv.DictReader(open(out / "seconds.csv", encoding="utf-8")))
    assert len(seconds) == int(s["wall_s"]) + (s["wall_s"] % 1 > 0)
    assert sum(float(r["tokens"]) for r in seconds) == pytest.approx(36 * QA_MAX_TOKENS)
    assert max(int(r["users_active"]) for r in seconds) <= 12
    assert (out / "timeline.png").stat().st_size > 10_000


def test_users_from_two_client_processes_are_judged_as_one_run(short_replies_app, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "users"
    code = cli.main(["qa-load", "--url", short_replies_app.app_url, "--users", "8", "--turns", "2",
                     "--think-s", "0.5", "--ramp-s", "2", "--reply-timeout-s", "90", "--processes", "2",
                     "--no-plots", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "(2 client processes)" in printed.err
    result = json.loads((out / "summary.json").read_text())
    s = result["summary"]
    assert result["processes"] == 2 and [u["user"] for u in result["users"]] == list(range(8))
    assert (s["users"], s["opened"], s["messages"], s["complete"]) == (8, 8, 16, 16)
    assert (s["lost"], s["crossed"], s["incomplete"], s["errors"]) == (0, 0, 0, 0)
    # One clock: user i arrived at i x ramp / users, whichever process ran it.
    assert [u["arrived_s"] for u in result["users"]] == pytest.approx([i * 2 / 8 for i in range(8)])
    assert all(u["opened_s"] >= u["arrived_s"] for u in result["users"])
    assert sum(float(r["tokens"]) for r in result["seconds"]) == pytest.approx(16 * QA_MAX_TOKENS)


async def test_the_same_users_straight_to_the_engine(engine):
    settings, _ = engine
    target = Target("engine", settings.engine_base_url, None, settings.system_prompt,
                    max_tokens=QA_MAX_TOKENS, ignore_eos=True)
    result = await run_user_load(target, UserModel(users=6, turns=2, think_s=0.2, ramp_s=1.0,
                                                   reply_timeout_s=90), list(DEFAULT_PROMPTS))
    s = result["summary"]
    assert s["ok"] and (s["complete"], s["crossed"]) == (12, None)
    assert all(r["tokens"] == QA_MAX_TOKENS and r["ttft_s"] < r["total_s"] for r in result["replies"])


def test_capacity_finds_users_within_an_objective_its_table_agrees_with(short_replies_app, tmp_path,  # noqa: F811
                                                                       capsys):
    out = tmp_path / "capacity"
    code = cli.main(["capacity", "--through", "app", "--url", short_replies_app.app_url,
                     "--objective-ttft-p99-ms", "3000", "--objective-tokens-per-s", "2",
                     "--start-users", "2", "--max-users", "8", "--step-s", "6", "--ramp-s", "1",
                     "--think-s", "0.5", "--reply-timeout-s", "60", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads((out / "capacity.json").read_text())
    found = result["users_within"]
    verdict = [line for line in printed.strip().splitlines() if not line.startswith("wrote ")][-1]
    assert found > 0 and verdict.startswith(f"{found} users within"), printed
    for step in result["steps"]:
        within = (step["errors"] == 0 and step["ttft_ms_p99"] is not None
                  and step["ttft_ms_p99"] <= 3000 and step["user_tokens_per_s_p10"] is not None
                  and step["user_tokens_per_s_p10"] >= 2)
        assert step["pass"] == within, step
        assert (out / f"users-{step['users']}-try-{step['tries']}" / "replies.csv").exists()
        assert step["tries"] <= 2 and (step["pass"] or step["tries"] == 2)  # a failure is tried twice
        # Every step's CPU by kind of process: the app worker and vLLM's engine core worked (the
        # load runs in this test's process, which counts as "other": no load clients here).
        busy = step["cpu"]["busy_cores"]
        assert busy["app workers"] > 0 and busy["engine core"] > 0 and busy["other"] > 0, busy
    passed = [s["users"] for s in result["steps"] if s["pass"]]
    failed = [s["users"] for s in result["steps"] if not s["pass"]]
    assert found == max(n for n in passed if not failed or n < min(failed))
    assert (out / "capacity.png").stat().st_size > 10_000
    assert capacity.render_table(result["steps"]).count("\n") == len(result["steps"])
    assert printed.count("  busy cores, ") == sum(s["tries"] for s in result["steps"])
    assert "CPU by kind of process, every step" in (out / "report.html").read_text(encoding="utf-8")


def test_capacity_shares_each_steps_users_over_client_processes(engine, tmp_path, capsys):
    settings, _ = engine
    out = tmp_path / "capacity"
    code = cli.main(["capacity", "--through", "engine", "--url", settings.engine_base_url,
                     "--objective-ttft-p99-ms", "60000", "--objective-tokens-per-s", "0.1",
                     "--start-users", "4", "--max-users", "4", "--step-s", "4", "--ramp-s", "1",
                     "--think-s", "0.5", "--output-len", "8", "--processes", "2", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "users from 2 client processes" in printed.out
    result = json.loads((out / "capacity.json").read_text())
    assert result["client_processes"] == 2 and result["users_within"] == 4
    step = json.loads((out / "users-4-try-1" / "summary.json").read_text())
    assert step["processes"] == 2 and [u["user"] for u in step["users"]] == [0, 1, 2, 3]
    assert step["summary"]["errors"] == 0 and step["summary"]["complete"] >= 4
    assert {r["user"] for r in step["replies"]} == {0, 1, 2, 3}
