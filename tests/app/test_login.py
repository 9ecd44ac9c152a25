"""The login throttle on a real app's POST /login (and on the stores of several workers): the
app runs with lowered delays (0.4 s doubling to 1.6 s) so the timings stay short."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from app.auth import device_cookie
from app.auth.login_throttle import ADDRESS_FREE_FAILURES, FREE_FAILURES, LoginThrottle, Policies, attempt_plan
from tests.support.settings import start_app
from tests.support.login import FakeClock, MAX_S, POLICY, USERS, login_app_settings, login


def test_parallel_workers_on_one_store_take_turns(new_store):
    """Guesses sent at once to four workers (four stores on one database) get distinct
    slots, one after another: the counts are read and written atomically."""
    policies = Policies.from_delays(1, 30, 600)
    plan = attempt_plan(policies, "alice", f"10.0.0.{time.time_ns() % 250}", device=None)
    clock = FakeClock()

    async def burst():
        workers = [new_store() for _ in range(4)]
        try:
            return await asyncio.gather(*(LoginThrottle(workers[i % 4], policies, clock).reserve(plan)
                                          for i in range(8)))
        finally:
            for worker in workers:
                await worker.close()
    waits = sorted(d.wait_s for d in asyncio.run(burst()) if d.wait_s is not None)
    # Free failures at once, then 1, 2, 4, 8, 16 s apart; the next would be 31 s ahead: refused.
    assert waits == [0, 0, 0, 1, 3, 7, 15], waits


def test_each_failure_waits_the_computed_delay_and_slows_only_that_user_there(login_app):
    answered = []  # when each answer came
    for _ in range(7):
        status, _, _ = login(login_app, "alice", "guess", source="127.0.0.2")
        assert status == 401
        answered.append(time.perf_counter())
    # The n-th attempt is checked delay(n - 1) after the one before it was: so (checks
    # taking 1 ms here) that far apart come the answers.
    gaps = [b - a for a, b in zip(answered, answered[1:])]
    expected = [POLICY.delay(n) for n in range(1, 7)]
    print("gaps measured", [f"{g:.2f}" for g in gaps], "expected", expected)
    for gap, wait in zip(gaps, expected):
        assert wait - 0.05 <= gap <= wait + 0.6, (gaps, expected)

    # Another client, another user: not slowed by alice's guesser.
    status, seconds, _ = login(login_app, "bob", "wrong", source="127.0.0.3")
    assert status == 401 and seconds < 0.3
    # Alice herself, elsewhere: not held for the guesser's next slot (1.6 s away), and her
    # browser is known from now on.
    status, seconds, response = login(login_app, "alice", "wonderland", source="127.0.0.4")
    assert status == 200 and "access_token" in response.cookies and seconds < 1.0
    assert device_cookie.COOKIE in response.cookies
    # The guesser's address for another user: within the address's free failures.
    assert login(login_app, "bob", "builder", source="127.0.0.2")[0] == 200


def test_logging_into_ones_own_account_does_not_reset_the_address(login_app):
    source = "127.0.0.20"
    for i in range(ADDRESS_FREE_FAILURES + 3):  # many names: the address counts every guess
        assert login(login_app, f"nobody{i}", "guess", source)[0] == 401
    status, _, _ = login(login_app, "bob", "builder", source)  # the guesser's own account
    assert status == 200
    status, seconds, _ = login(login_app, "nobody", "guess", source)
    print(f"the next guess from the address waited {seconds:.2f} s")
    # Up to MAX_S, less the time bob's login took on busy cores; none had the count been cleared.
    assert status == 401 and seconds >= MAX_S / 2, "the address's count was cleared"


@pytest.mark.parametrize("kept_in", ["sqlite", "postgres"])
def test_a_throttled_address_stays_throttled_after_a_restart(tmp_path, request, kept_in):
    # ERNIE_AUTH_DB (conftest: tmp_path / "auth.db"), or the PostgreSQL chat database.
    chat_db = {"chat_db": request.getfixturevalue("database")} if kept_in == "postgres" else {}

    def started():
        return start_app(tmp_path, **login_app_settings(tmp_path, **chat_db))
    first = started()
    try:
        app = next(first)
        for _ in range(FREE_FAILURES + 4):
            login(app, "carol", "guess", "127.0.0.50")
    finally:
        first.close()
    second = started()
    try:
        app = next(second)
        # The slot the last guess left has passed during the restart; the one after waits.
        login(app, "carol", "guess", "127.0.0.50")
        status, seconds, _ = login(app, "carol", "guess", "127.0.0.50")
        # Up to MAX_S, less the time the guess before took; none had the count been lost.
        assert status == 401 and seconds >= MAX_S / 2, f"{seconds:.2f} s: the count was lost"
        assert (tmp_path / "auth.db").exists() == (kept_in == "sqlite"), "kept where it should be"
    finally:
        second.close()


def test_a_burst_of_parallel_guesses_gets_429_not_more_checks(login_app):
    chinese = {"accept-language": "zh-CN,zh;q=0.9"}

    def guess(i):  # every other one from a Chinese browser
        return login(login_app, "carol", f"guess{i}", source="127.0.0.5", headers=chinese if i % 2 else None)
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(guess, range(12)))
    statuses = [status for status, _, _ in results]
    assert statuses.count(429) >= 5 and statuses.count(401) + statuses.count(429) == 12, statuses
    for i, (status, _, response) in enumerate(results):
        if status == 429:
            assert int(response.headers["retry-after"]) >= 1
            expected = "登录失败次数过多" if i % 2 else "Too many failed logins"
            assert expected in response.json()["detail"]


def test_a_login_posted_from_another_site_is_refused(login_app):
    """Login CSRF: a form on another site posting the attacker's name and password would sign
    the visitor's browser into the attacker's account. Browsers send the page's Origin."""
    for origin, expected in (("https://evil.example", 403), ("null", 403),
                             (login_app.app_url.replace("127.0.0.1", "127.0.0.1.evil.example"), 403),
                             (login_app.app_url, 200), (None, 200)):
        status, _, response = login(login_app, "dave", USERS["dave"], source="127.0.0.9",
                                    headers={"Origin": origin} if origin else None)
        assert status == expected, (origin, response.text)
        assert ("access_token" in response.cookies) == (expected == 200), (origin, response.headers)
        if expected == 403:
            assert "from another site" in response.json()["detail"]
