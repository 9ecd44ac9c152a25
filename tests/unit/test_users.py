"""The user model's figures, its scheduling, and the capacity search, without a server.

The live runs (the real app and the real engine) are in tests/app/test_user_load.py.
The scheduling test drives ``run_users`` with a scripted chat that answers after a
fixed delay: what is checked is when users arrive, speak and leave, not a server.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from server.loadtest.users import capacity
from server.loadtest.users.capacity import Objective, bounds, next_users, step_row
from server.loadtest.users.chats import Reply
from server.loadtest.users.model import ReplyRecord, UserModel, UserRecord, UsersError, run_users
from server.loadtest.users import report as user_report
from server.loadtest.users.stats import live, per_second, steady, summarize_users, user_rates


def reply(user: int, turn: int, sent_s: float, ttft_s=0.5, total_s=2.5, tokens=41, error="",
          complete=True) -> ReplyRecord:
    return ReplyRecord(user, turn, sent_s, ttft_s, total_s, tokens, complete, error)


# --- figures ----------------------------------------------------------------------

def test_a_reply_decodes_its_tokens_after_the_first_over_the_time_after_the_first():
    assert reply(0, 0, 0.0).decode_tokens_per_s == pytest.approx(40 / 2.0)
    assert reply(0, 0, 0.0, tokens=1).decode_tokens_per_s is None
    assert reply(0, 0, 0.0, total_s=None).decode_tokens_per_s is None


def test_a_users_rate_weighs_its_replies_by_their_tokens():
    # User 0: 40 tokens in 2 s, then 10 in 3 s: 50 / 5 = 10 tok/s, not the mean of 20 and 3.3.
    rates = user_rates([reply(0, 0, 0.0), reply(0, 1, 5.0, ttft_s=1.0, total_s=4.0, tokens=11),
                        reply(1, 0, 0.0, tokens=21)])
    assert sorted(rates) == pytest.approx([10.0, 10.0])


def test_tokens_are_spread_over_the_seconds_a_reply_streamed():
    # First token at 1.5 s, done at 3.5 s: 40 tokens over 2 s, 10 / 20 / 10 in seconds 1, 2, 3.
    rows = per_second([UserRecord(0, 0.0, 0.1, 6.0)], [reply(0, 0, 1.0, ttft_s=0.5, total_s=2.5, tokens=40)], 6.0)
    assert [round(r["tokens"], 6) for r in rows] == [0, 10, 20, 10, 0, 0]
    assert sum(r["tokens"] for r in rows) == pytest.approx(40)
    assert [r["replies_done"] for r in rows] == [0, 0, 0, 1, 0, 0]
    assert rows[1]["ttft_ms_p50"] == pytest.approx(500) and rows[2]["ttft_ms_p50"] is None
    assert [r["users_active"] for r in rows] == [1] * 6


def test_users_count_only_while_they_are_there():
    users = [UserRecord(0, 0.0, 0.1, 2.0), UserRecord(1, 1.0, 1.1, 4.0)]
    assert [r["users_active"] for r in per_second(users, [], 4.0)] == [1, 2, 1, 1]


def test_the_verdict_counts_lost_incomplete_crossed_and_failed_opens():
    users = [UserRecord(0, 0.0, 0.1, 9.0), UserRecord(1, 0.0, 0.1, 9.0, error="refused")]
    good = [reply(0, 0, 0.0), reply(0, 1, 4.0)]
    s = summarize_users(users[:1], good, crossed=0, wall_s=9.0, ramp_s=0.0, window_s=None)
    assert s["ok"] and (s["lost"], s["incomplete"], s["errors"], s["complete"]) == (0, 0, 0, 2)
    lost = reply(0, 2, 8.0, ttft_s=None, total_s=None, tokens=None, error="no whole reply within 5 s",
                 complete=False)
    s = summarize_users(users, good + [lost], crossed=0, wall_s=9.0, ramp_s=0.0, window_s=None)
    assert (s["lost"], s["errors"], s["opened"]) == (1, 2, 1) and not s["ok"]
    assert s["error_reasons"] == {"refused": 1, "no whole reply within 5 s": 1}
    half = reply(0, 2, 8.0, complete=False)
    s = summarize_users(users[:1], good + [half], crossed=0, wall_s=9.0, ramp_s=0.0, window_s=None)
    assert s["incomplete"] == 1 and not s["ok"]
    assert not summarize_users(users[:1], good, crossed=1, wall_s=9.0, ramp_s=0.0, window_s=None)["ok"]
    assert summarize_users(users[:1], good, crossed=None, wall_s=9.0, ramp_s=0.0, window_s=None)["ok"]


def test_limit_and_busy_answers_are_outcomes_of_their_own_not_failures():
    users = [UserRecord(0, 0.0, 0.1, 9.0)]
    answered = [ReplyRecord(0, 0, 0.0, outcome="limited"), ReplyRecord(0, 1, 1.0, outcome="busy_refused"),
                ReplyRecord(0, 2, 2.0, 0.5, 2.5, 41, True, outcome="busy_waited")]
    s = summarize_users(users, answered, crossed=0, wall_s=9.0, ramp_s=0.0, window_s=None)
    assert s["ok"] and (s["refused"], s["lost"], s["errors"], s["complete"]) == (2, 0, 0, 1)
    assert {k: n for k, n in s["outcomes"].items() if n} == {"limited": 1, "busy_refused": 1,
                                                             "busy_waited": 1}
    assert "refused 2" in user_report.render({"summary": s, "through": "app", "url": "u", "model": {
        "turns": 3, "think_s": 5, "ramp_s": 0, "window_s": None}})


def test_the_steady_state_is_after_the_ramp_and_inside_the_window():
    replies = [reply(0, 0, 1.0), reply(0, 1, 5.0), reply(0, 2, 12.0)]
    assert [r.sent_s for r in steady(replies, ramp_s=2.0, window_s=10.0)] == [5.0]
    s = summarize_users([UserRecord(0, 0.0, 0.1, 15.0)], replies, 0, 15.0, ramp_s=2.0, window_s=10.0)
    assert s["steady"]["replies"] == 1 and s["steady"]["replies_per_s"] == pytest.approx(1 / 8)
    assert s["all"]["replies"] == 3


def test_the_live_line_shows_the_last_seconds():
    users = [UserRecord(0, 0.0, 0.1), UserRecord(1, 50.0)]
    replies = [reply(0, 0, 0.0), reply(0, 1, 20.0, ttft_s=0.2, total_s=None, tokens=None)]
    line = live(users, replies, now=21.0, window_s=10.0)
    assert line.startswith("users 1/2  in flight 1  replies/s 0.0")
    assert "TTFT p50 200 p99 200 ms" in line and line.endswith("errors 0")


# --- scheduling ----------------------------------------------------------------------

class ScriptedChat:
    """Answers every message after ``delay_s`` with a complete 11-token reply."""

    session = None

    def __init__(self, delay_s: float, log: list):
        self.delay_s, self.log = delay_s, log

    async def open(self) -> str:
        return ""

    async def ask(self, prompt: str) -> Reply:
        self.log.append((asyncio.get_running_loop().time(), prompt))
        await asyncio.sleep(self.delay_s)
        return Reply(0.01, self.delay_s, 11, True)

    async def close(self) -> None:
        pass


async def test_users_arrive_over_the_ramp_and_speak_their_turns_with_pauses():
    log: list = []
    model = UserModel(users=4, turns=3, think_s=0.2, ramp_s=0.4)
    run = await run_users(model, lambda i, tag: ScriptedChat(0.05, log), ["a", "b"])
    assert [u.arrived_s for u in run.users] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert all(u.opened_s >= u.arrived_s for u in run.users)
    assert len(run.replies) == 12 and all(r.complete for r in run.replies)
    by_user = {u: sorted(r.sent_s for r in run.replies if r.user == u) for u in range(4)}
    for sent in by_user.values():  # reply (0.05 s) + think (0.1-0.3 s) between two messages
        assert all(0.14 <= b - a <= 0.45 for a, b in zip(sent, sent[1:]))
    prompts = [p for _, p in log]
    assert len({p.split("]")[0] for p in prompts}) == 4  # one tag per user, on every message


async def test_a_client_process_runs_its_share_of_users_as_one_process_would():
    model = UserModel(users=5, turns=2, think_s=0.6, ramp_s=0.5)  # pauses of 0.3-0.9 s
    whole = await run_users(model, lambda i, tag: ScriptedChat(0.01, []), ["a"])
    share = await run_users(model, lambda i, tag: ScriptedChat(0.01, []), ["a"], share=(1, 2))
    assert [u.user for u in share.users] == [1, 3]
    assert [u.arrived_s for u in share.users] == [whole.users[1].arrived_s, whole.users[3].arrived_s]
    # Each user thinks with its own seed: the pause between its two messages is the same.
    def pause(run, user: int) -> float:
        first, second = sorted(r.sent_s for r in run.replies if r.user == user)
        return second - first
    for user in (1, 3):
        # 0.1 s: what a loaded machine may add to one pause, a third of another seed's difference
        assert pause(share, user) == pytest.approx(pause(whole, user), abs=0.1)


def test_the_live_counts_of_client_processes_add_up():
    from server.loadtest.users.processes import added, check_processes
    from server.loadtest.users.stats import live_counts, live_line
    a = live_counts([UserRecord(0, 0.0, 0.1)], [reply(0, 0, 0.0, total_s=None)], now=5.0)
    b = live_counts([UserRecord(1, 0.5, 0.6), UserRecord(3, 1.0)], [reply(1, 0, 1.0)], now=5.0)
    both = added([a, b])
    assert (both["present"], both["users"], both["waiting"], both["done"], both["tokens"]) == (3, 3, 1, 1, 41)
    assert live_line(both).startswith("users 3/3  in flight 1  replies/s 0.2  tokens/s 8")
    with pytest.raises(UsersError, match="--processes 3 is more than the 2 users"):
        check_processes(3, 2)
    with pytest.raises(UsersError, match="between 1 and 16"):
        check_processes(17, 100)


async def test_the_users_clock_start_is_told_before_the_first_user_arrives():
    """What qa-load --kill counts its seconds from (server/loadtest/lib/kills.py)."""
    starts: list[float] = []
    arrived: list[float] = []

    def chat(i: int, tag: str) -> ScriptedChat:
        arrived.append(len(starts))
        return ScriptedChat(0.01, [])
    before = time.perf_counter()
    run = await run_users(UserModel(users=2, turns=1, think_s=0.0, ramp_s=0.2), chat, ["a"],
                          on_start=starts.append)
    assert starts == [run.started] and before <= run.started and arrived == [1, 1]


async def test_no_message_is_sent_after_the_window():
    model = UserModel(users=2, turns=0, think_s=0.1, ramp_s=0.1, window_s=0.6)
    run = await run_users(model, lambda i, tag: ScriptedChat(0.05, []), ["a"])
    assert run.replies and all(r.sent_s < 0.6 for r in run.replies)
    assert all(r.total_s is not None for r in run.replies)


async def test_a_reply_that_never_ends_is_an_error_and_the_user_leaves():
    model = UserModel(users=1, turns=3, think_s=0.0, ramp_s=0.0, reply_timeout_s=0.2)
    run = await run_users(model, lambda i, tag: ScriptedChat(5.0, []), ["a"])
    assert len(run.replies) == 1 and run.replies[0].error == "no whole reply within 0.2 s"


@pytest.mark.parametrize("model, message", [
    (UserModel(users=0), "between 1 and"),
    (UserModel(users=4001), "between 1 and"),
    (UserModel(users=2, turns=0), "need a send window"),
    (UserModel(users=2, ramp_s=10, window_s=5), "must be longer than --ramp-s"),
    (UserModel(users=2, think_s=-1), "must not be negative"),
])
def test_a_bad_user_model_is_refused_with_the_reason(model, message):
    with pytest.raises(UsersError, match=message):
        model.check()


# --- the capacity search ------------------------------------------------------------------

def search_with(threshold: int, start: int = 8, max_users: int = 1000, precision: float = 0.1):
    """The sequence the search tries when exactly the steps of at most ``threshold`` users pass."""
    results: dict[int, bool] = {}
    while (n := next_users(results, start, max_users, precision)) is not None:
        results[n] = n <= threshold
        assert len(results) < 30
    return list(results), bounds(results)[0]


def test_the_search_doubles_then_bisects_to_within_the_precision():
    tried, found = search_with(100)
    assert tried[:5] == [8, 16, 32, 64, 128]
    assert 100 - 0.1 * 100 <= found <= 100


def test_a_search_whose_first_step_fails_goes_down_to_one_user_or_none():
    tried, found = search_with(3)
    assert tried[0] == 8 and found == 3
    assert search_with(0)[1] == 0


def test_the_search_stops_at_the_most_users_allowed():
    tried, found = search_with(10_000, max_users=50)
    assert tried == [8, 16, 32, 50] and found == 50


def test_a_noisy_pass_above_a_failure_does_not_raise_the_answer():
    assert bounds({8: True, 16: False, 32: True}) == (8, 16)


def steady_figures(p99=800.0, p10=25.0, replies=40) -> dict:
    return {"replies": replies, "ttft_ms_p50": 300.0, "ttft_ms_p99": p99,
            "user_tokens_per_s_p10": p10, "user_tokens_per_s_p50": 30.0,
            "replies_per_s": 2.0, "tokens_per_s": 500.0}


@pytest.mark.parametrize("steady_part, accounting, ok, why", [
    (steady_figures(), {}, True, ""),
    (steady_figures(p99=1200.0), {}, False, "TTFT p99 1200 ms > 1000"),
    (steady_figures(p10=19.5), {}, False, "per-user tokens/s p10 19.5 < 20"),
    (steady_figures(replies=0), {}, False, "no reply in the steady state"),
    (steady_figures(), {"lost": 1}, False, "lost, failed or crossed"),
    (steady_figures(), {"crossed": 2}, False, "lost, failed or crossed"),
])
def test_a_step_passes_only_within_every_part_of_the_objective(steady_part, accounting, ok, why):
    summary = {"lost": 0, "errors": 0, "crossed": 0, "steady": steady_part, **accounting}
    row = step_row(16, summary, Objective(1000.0, 20.0))
    assert row["pass"] is ok and row["why"].startswith(why)


def test_the_answer_names_the_users_and_the_objective():
    rows = [{"users": 8, "pass": True}, {"users": 16, "pass": False}, {"users": 12, "pass": True}]
    text = capacity.answer(rows, Objective(1000.0, 20.0), 1000, "app")
    assert text.startswith("12 users within the objective (TTFT p99 <= 1000 ms")
    assert capacity.answer([{"users": 8, "pass": False}], Objective(), 1000, "engine").startswith("No number")


def test_a_search_going_below_its_client_processes_runs_each_step_with_at_most_one_per_user(
        monkeypatch, tmp_path):
    asked = []

    async def fake_load(target, model, prompts, label, processes):
        asked.append((model.users, processes))
        steady = {"replies": 5, "ttft_ms_p50": 100.0, "ttft_ms_p99": 5000.0,  # every step fails
                  "user_tokens_per_s_p10": 30.0, "user_tokens_per_s_p50": 40.0,
                  "replies_per_s": 1.0, "tokens_per_s": 30.0}
        return {"summary": {"steady": steady, "lost": 0, "errors": 0, "crossed": 0}, "cpu": {}}

    monkeypatch.setattr(capacity, "sampled_user_load", fake_load)
    monkeypatch.setattr(capacity.user_report, "save", lambda *a, **k: [])
    monkeypatch.setattr(capacity, "SETTLE_S", 0.0)
    rows = asyncio.run(capacity.search(None, Objective(), UserModel(users=1), ["a"], start=8,
                                       max_users=16, precision=0.1, retries=0, out_dir=tmp_path,
                                       processes=4))
    assert [r["users"] for r in rows] == [8, 4, 2, 1] and not any(r["pass"] for r in rows)
    assert asked == [(8, 4), (4, 4), (2, 2), (1, 1)]

