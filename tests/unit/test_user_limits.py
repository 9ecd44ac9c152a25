"""Per-user limits and the busy answer: the window math, the tokens reserved at admission and
settled after, the replies at once, and the shared store across workers.

The math is pure (time passed in); the store tests use the real SQLite file that several
app workers share (``server/auth_store.py``), opened twice as two workers would.
"""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from app.auth import user_limits
from app.auth.user_limits import (DAY_S, Held, Limits, Rate, Refusal, RepliesAtOnce, UserLimits, admit, reservation,
                                  spend_tokens, user_key)
from app.engine import busy
from app.texts import duration
from server.auth_store import SqliteStore
from server.metrics import EngineMetrics


def metrics(waiting: int, running: int = 4, e2e=(0.0, 0)) -> EngineMetrics:
    return EngineMetrics(kv_cache_usage=0.5, running=running, waiting=waiting, preemptions=0,
                         kv_cache_tokens=None, prompt_tokens=0, generation_tokens=0, e2e=e2e)


# --- the window math -------------------------------------------------------------------

def test_a_user_may_send_the_whole_minute_at_once_then_one_per_share_of_it():
    limits, states = Limits.from_settings(3, 0), {}
    assert [admit(states, limits, "u", 100.0) for _ in range(3)] == [None] * 3
    refused = admit(states, limits, "u", 100.0)
    assert refused == Refusal("messages", 3, pytest.approx(20.0))  # one comes back every 20 s
    assert admit(states, limits, "u", 119.0).retry_after_s == pytest.approx(1.0)
    assert admit(states, limits, "u", 120.0) is None
    assert admit(states, limits, "u", 120.0) is not None


def test_a_refused_message_counts_nowhere_and_users_do_not_share():
    limits, states = Limits.from_settings(1, 0), {}
    assert admit(states, limits, "a", 0.0) is None
    for _ in range(5):  # hammering while refused does not push the retry further away
        assert admit(states, limits, "a", 30.0).retry_after_s == pytest.approx(30.0)
    assert admit(states, limits, "b", 30.0) is None
    assert admit(states, limits, "a", 60.0) is None


def test_tokens_a_day_are_reserved_at_admission_and_come_back_evenly():
    rate = Rate(1000, DAY_S)
    limits, states = Limits(None, rate), {}
    assert admit(states, limits, "u", 0.0, tokens=1000) is None  # the whole day's tokens reserved
    refused = admit(states, limits, "u", 0.0, tokens=1)
    assert refused.limit == "tokens" and refused.retry_after_s == pytest.approx(DAY_S / 1000)
    assert admit(states, limits, "u", DAY_S / 1000, tokens=1) is None  # room for one token again
    # A reply that ran over its reservation by 500: the next waits for those too.
    spend_tokens(states, rate, "u", 500, DAY_S / 1000)
    assert admit(states, limits, "u", DAY_S / 1000, tokens=1).retry_after_s == pytest.approx(DAY_S / 2 + DAY_S / 1000)


def test_a_reservation_needs_room_for_all_of_it_and_a_refusal_reserves_nothing():
    limits, states = Limits(None, Rate(50, DAY_S)), {}
    answers = [admit(states, limits, "u", 0.0, tokens=50) for _ in range(10)]  # ten sent at once
    assert answers[0] is None and all(a is not None and a.limit == "tokens" for a in answers[1:])
    assert all(a.retry_after_s == pytest.approx(DAY_S) for a in answers[1:])  # nothing more was taken
    # Half the day's room back (12 h later): a reservation of 30 still waits, one of 25 fits.
    assert admit(states, limits, "u", DAY_S / 2, tokens=30).retry_after_s == pytest.approx(5 * DAY_S / 50)
    assert admit(states, limits, "u", DAY_S / 2, tokens=25) is None


def test_a_command_reserves_no_tokens_and_needs_no_room():
    limits, states = Limits.from_settings(3, 50), {}
    assert admit(states, limits, "u", 0.0, tokens=50) is None
    assert admit(states, limits, "u", 0.0, tokens=0) is None  # a command: counted as a message only
    assert admit(states, limits, "u", 0.0, tokens=1).limit == "tokens"
    assert admit(states, limits, "u", 0.0, tokens=0) is None
    assert admit(states, limits, "u", 0.0, tokens=0).limit == "messages"  # the fourth message


def test_the_reservation_is_the_prompt_and_the_longest_reply_within_the_window_and_the_day():
    day = Rate(200_000, DAY_S)
    assert reservation(300, 512, 4096, day) == 812
    assert reservation(9_000, 512, 4096, day) == 4096  # a prompt never outgrows the window
    assert reservation(300, 512, 4096, day, replies=3) == 3 * 812  # /compare: a reply per model
    assert reservation(300, 512, 4096, Rate(50, DAY_S)) == 50  # a small day still admits a message
    assert reservation(0, 0, 4096, day) == 1
    assert reservation(300, 512, 4096, None) == 0  # no day's limit: nothing to reserve


def test_a_reservation_is_settled_against_what_the_replies_spent():
    rate = Rate(1000, DAY_S)
    states, per_token = {}, DAY_S / 1000

    def reserve(tokens: int) -> Held:
        assert admit(states, Limits(None, rate), "u", 0.0, tokens=tokens) is None
        return Held(tokens)

    def settle(held: Held, spent: int) -> None:  # as app/conversation/admission.py does
        if more := held.cover(spent):
            spend_tokens(states, rate, "u", more, 0.0)
        spend_tokens(states, rate, "u", -held.release(), 0.0)

    settle(reserve(600), 100)  # 500 given back
    assert states["tokens:u"].ready_at == pytest.approx(100 * per_token)
    settle(reserve(300), 450)  # 150 more taken
    assert states["tokens:u"].ready_at == pytest.approx(550 * per_token)
    settle(reserve(50), 0)  # a reply that never came: all of it back
    assert states["tokens:u"].ready_at == pytest.approx(550 * per_token)
    held = reserve(400)  # /compare: two replies from one reservation
    assert (held.cover(150), held.cover(300)) == (0, 50)
    assert held.release() == 0 and held.release() == 0


def test_given_back_the_day_is_never_more_than_whole():
    rate, states = Rate(100, DAY_S), {}
    spend_tokens(states, rate, "u", 10, 0.0)
    spend_tokens(states, rate, "u", -60, 0.0)  # more back than the row holds: a moment past
    assert admit(states, Limits(None, rate), "u", 0.0, tokens=100) is None
    assert admit(states, Limits(None, rate), "u", 0.0, tokens=1).limit == "tokens"


def test_replies_at_once_are_capped_per_user_and_come_back():
    replies = RepliesAtOnce(2)
    assert [replies.take("a") for _ in range(3)] == [True, True, False]
    assert replies.take("b")  # another user is another count
    replies.give("a")
    assert replies.take("a") and not replies.take("a")
    for _ in range(2):
        replies.give("a")
    replies.give("b")
    assert replies.running == {}  # nothing kept for users with none running
    assert all(RepliesAtOnce(0).take("a") for _ in range(100))  # 0: no cap


def test_the_limit_that_holds_longest_is_the_one_named():
    limits, states = Limits.from_settings(10, 100), {}
    assert admit(states, limits, "u", 0.0, tokens=1) is None
    spend_tokens(states, limits.tokens, "u", 200, 0.0)
    assert admit(states, limits, "u", 0.0, tokens=1).limit == "tokens"


def test_limits_off_admit_everything():
    assert not Limits.from_settings(0, 0).on
    assert all(admit({}, Limits.from_settings(0, 0), "u", 0.0) is None for _ in range(100))


def test_a_row_is_forgotten_once_it_says_no_more_than_a_missing_one():
    limits, states = Limits.from_settings(2, 0), {}
    admit(states, limits, "u", 10.0)
    assert states["messages:u"].updated == states["messages:u"].ready_at == pytest.approx(40.0)


def test_a_local_rate_lets_a_burst_through_then_one_per_share_and_keys_do_not_share():
    clock = [100.0]
    rate = user_limits.LocalRate(Rate(240, 60.0), clock=lambda: clock[0])
    assert [rate.take("addr:203.0.113.7") for _ in range(240)] == [0.0] * 240
    assert rate.take("addr:203.0.113.7") == pytest.approx(0.25)  # refused, counted nowhere
    assert rate.take("addr:203.0.113.8") == 0.0
    clock[0] += 0.25
    assert rate.take("addr:203.0.113.7") == 0.0 and rate.take("addr:203.0.113.7") > 0


def test_a_local_rate_forgets_keys_whose_allowance_is_whole_again():
    clock = [0.0]
    rate = user_limits.LocalRate(Rate(1, 60.0), clock=lambda: clock[0])
    for i in range(1023):
        rate.take(f"addr:{i}")
    clock[0] = 61.0
    rate.take("addr:new")
    assert list(rate.ready_at) == ["addr:new"] and rate.sweep_at == 1024


def test_a_user_is_the_login_name_else_the_address():
    assert user_key("alice", "10.0.0.1") == "user:alice"
    assert user_key(None, "10.0.0.1") == "addr:10.0.0.1"
    assert user_key(None, "2001:db8::1") == user_key(None, "2001:db8::2")  # one /64, one machine


@pytest.mark.parametrize("seconds, en, zh", [
    (0.2, "1 s", " 1 秒"), (59.1, "60 s", " 60 秒"), (95, "2 min", " 2 分钟"),
    (5400, "1 h 30 min", " 1 小时 30 分钟"), (None, "a short while", "一小会儿")])
def test_waits_read_as_people_say_them(seconds, en, zh):
    assert (duration("en", seconds), duration("zh", seconds)) == (en, zh)


# --- busy ------------------------------------------------------------------------------

def test_busy_only_past_the_bound_and_only_with_metrics():
    assert busy.busy_of(None, 0, deque()) is None
    assert busy.busy_of(metrics(waiting=1), 1, deque()) is None
    assert busy.busy_of(metrics(waiting=2), 1, deque()).ahead == 2


def test_the_wait_is_the_queue_at_the_recent_rate_of_finishing():
    samples = deque()
    for t, finished in ((0.0, 100), (5.0, 110), (10.0, 120)):  # 2 finished a second
        busy.remember(samples, t, finished)
    assert busy.finish_rate(samples) == pytest.approx(2.0)
    assert busy.busy_of(metrics(waiting=5), 0, samples).wait_s == pytest.approx(3.0)  # 5 ahead + itself


def test_without_recent_throughput_littles_law_stands_in():
    # 4 running, each took 8 s on average: half a request finishes a second.
    assert busy.estimate_wait_s(3, None, metrics(3, running=4, e2e=(80.0, 10))) == pytest.approx(8.0)
    assert busy.estimate_wait_s(3, None, metrics(3)) is None  # nothing finished yet: no figure


def test_old_readings_leave_the_window_and_a_restart_clears_it():
    samples = deque()
    busy.remember(samples, 0.0, 50)
    busy.remember(samples, busy.WINDOW_S + 1, 60)
    assert list(samples) == [(busy.WINDOW_S + 1, 60)]
    busy.remember(samples, busy.WINDOW_S + 2, 3)  # the engine restarted: its counters too
    assert list(samples) == [(busy.WINDOW_S + 2, 3)]
    assert busy.finish_rate(deque([(0.0, 1), (1.0, 5)])) is None  # too short a span to tell


def test_the_gauge_reads_the_engine_at_most_every_half_second():
    reads, now = [], [0.0]

    async def read():
        reads.append(now[0])
        return metrics(waiting=3)

    async def main():
        gauge = busy.BusyGauge(0, read, clock=lambda: now[0])
        await asyncio.gather(*(gauge.busy() for _ in range(20)))
        now[0] = 0.4
        assert (await gauge.busy()).ahead == 3
        now[0] = 0.6
        await gauge.busy()
    asyncio.run(main())
    assert reads == [0.0, 0.6]


def test_an_engine_that_cannot_be_read_is_not_called_busy():
    async def read():
        raise OSError("refused")
    assert asyncio.run(busy.BusyGauge(0, read).busy()) is None


def test_tokens_spent_on_one_worker_hold_on_the_other(tmp_path):
    limits, clock = Limits.from_settings(0, 100), lambda: 1000.0
    one, other = (UserLimits(SqliteStore(tmp_path / "auth.db"), limits, clock) for _ in range(2))
    asyncio.run(one.spend_tokens("user:bob", 150))
    refused = asyncio.run(other.admit("user:bob", tokens=10))
    assert refused.limit == "tokens" and refused.retry_after_s == pytest.approx(DAY_S / 2 + DAY_S / 10)
    asyncio.run(one.spend_tokens("user:bob", -100))  # given back on one worker: room on the other
    assert asyncio.run(other.admit("user:bob", tokens=10)) is None


def test_the_login_throttle_and_the_limits_keep_their_own_rows(tmp_path):
    from server.auth_store import LIMIT_KEYS, LOGIN_KEYS
    import sqlite3
    store = SqliteStore(tmp_path / "auth.db")
    asyncio.run(UserLimits(store, Limits.from_settings(1, 0), lambda: 0.0).admit("u"))
    db = sqlite3.connect(tmp_path / "auth.db")
    assert db.execute(f"SELECT key FROM {LIMIT_KEYS}").fetchall() == [("messages:u",)]
    assert db.execute(f"SELECT count(*) FROM {LOGIN_KEYS}").fetchone() == (0,)
    with pytest.raises(ValueError):
        asyncio.run(store.update_keys(["k"], lambda states: None, 0.0, "other; DROP TABLE x"))
