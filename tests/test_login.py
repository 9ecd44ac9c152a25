"""Login that resists guessing: the throttle's schedule, then the real app's POST /login.

The app runs with lowered delays (0.4 s doubling to 1.6 s) so the timings stay short;
the defaults are checked by simulating an attacker on the same throttle with a
fake clock.  Requests come from different loopback addresses (127.0.0.x), which
is what the app sees as different clients.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from app.login_throttle import FREE_FAILURES, DelayPolicy, LoginThrottle, address_key, attempt_keys
from server.passwords import hash_password
from server.stack.processes import free_port
from tests.conftest import start_app


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def sequential_guesses(throttle: LoginThrottle, clock: FakeClock, n: int, keys) -> list[float]:
    """An attacker that sends the next guess as soon as the previous answer came: its waits."""
    waits = []
    for _ in range(n):
        wait = throttle.reserve(keys)
        assert wait is not None, "a patient attacker is slowed, never refused"
        waits.append(wait)
        clock.now += wait + 0.01  # the answer comes 10 ms after the check starts
    return waits


def test_the_delay_doubles_after_the_free_failures_up_to_the_cap():
    policy = DelayPolicy(base_s=1, max_s=30)
    assert [policy.delay(n) for n in range(FREE_FAILURES + 1)] == [0.0] * (FREE_FAILURES + 1)
    assert [policy.delay(FREE_FAILURES + k) for k in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_thirty_wrong_guesses_take_minutes_with_the_defaults():
    clock = FakeClock()
    keys = attempt_keys("alice", "10.0.0.1")
    waits = sequential_guesses(LoginThrottle(DelayPolicy(), clock), clock, 30, keys)
    print(f"30 sequential guesses wait {sum(waits):.0f} s in all (default settings)")
    assert sum(waits) >= 10 * 60
    assert max(waits) <= DelayPolicy().max_s, "the real user never waits longer than the cap"


def test_parallel_guesses_are_queued_or_refused_not_checked_at_once():
    clock = FakeClock()
    throttle = LoginThrottle(DelayPolicy(base_s=1, max_s=4), clock)
    keys = attempt_keys("alice", "10.0.0.1")
    sequential_guesses(throttle, clock, FREE_FAILURES + 2, keys)  # the delay is 2 s now
    burst = [throttle.reserve(keys) for _ in range(10)]           # ten at the same instant
    checked = [w for w in burst if w is not None]
    assert checked == sorted(checked) and len(set(checked)) == len(checked), burst
    assert len(checked) <= 3 and burst.count(None) >= 7, burst
    assert 0 < throttle.retry_after(keys) <= 4 + 4


def test_success_clears_the_count_and_failures_fade_with_time():
    clock = FakeClock()
    throttle = LoginThrottle(DelayPolicy(base_s=1, max_s=30, half_life_s=60), clock)
    keys = attempt_keys("alice", "10.0.0.1")
    sequential_guesses(throttle, clock, 8, keys)
    throttle.succeeded(keys)
    assert throttle.reserve(keys) == 0.0
    sequential_guesses(throttle, clock, 8, keys)
    clock.now += 10 * 60  # ten half-lives: 9 failures decay to under one
    assert sequential_guesses(throttle, clock, 2, keys) == [0.0, 0.0]


def test_keys_are_per_user_and_per_address():
    clock = FakeClock()
    throttle = LoginThrottle(DelayPolicy(base_s=1, max_s=30), clock)
    sequential_guesses(throttle, clock, 8, attempt_keys("alice", "10.0.0.1"))
    assert throttle.reserve(attempt_keys("bob", "10.0.0.2")) == 0.0      # neither key shared
    assert throttle.reserve(attempt_keys("bob", "10.0.0.1")) > 0         # same address
    assert throttle.reserve(attempt_keys("alice", "10.0.0.3")) > 0       # same user


def test_an_ipv6_client_is_one_address_per_slash_64():
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1") == "addr:2001:db8::/64"
    assert address_key("2001:db8:0:1::1") != address_key("2001:db8::1")
    assert address_key("::ffff:10.0.0.1") == address_key("10.0.0.1") == "addr:10.0.0.1"


# --- the real app: POST /login ----------------------------------------------------------

BASE_S, MAX_S = 0.4, 1.6
POLICY = DelayPolicy(BASE_S, MAX_S)
USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet", "dave": "gilmour"}


@pytest.fixture(scope="module")
def login_app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("login")
    # 2^4 rounds: the same bcrypt path, but 1 ms a check, so the timings show the delays.
    users = ",".join(f"{name}:{hash_password(pw, rounds=4)}" for name, pw in USERS.items())
    yield from start_app(tmp, engine_url=f"http://127.0.0.1:{free_port()}", chat_db=tmp / "chats.db",
                         users=users, login_delay_base_s=BASE_S, login_delay_max_s=MAX_S)


def login(settings, user, password, source="127.0.0.1", headers=None) -> tuple[int, float, httpx.Response]:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30, headers=headers) as http:
        start = time.perf_counter()
        response = http.post(f"{settings.app_url}/login", data={"username": user, "password": password})
        return response.status_code, time.perf_counter() - start, response


def test_each_failure_waits_the_computed_delay_and_other_clients_are_not_slowed(login_app):
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
    # The guesser's address is slowed for every user, and alice is slowed from everywhere.
    assert login(login_app, "bob", "builder", source="127.0.0.2")[1] >= MAX_S - 0.3
    status, seconds, response = login(login_app, "alice", "wonderland", source="127.0.0.4")
    # After the wait, alice's right password works; her count starts again from zero.
    assert status == 200 and "access_token" in response.cookies and seconds <= MAX_S + 0.6
    assert login(login_app, "alice", "guess", source="127.0.0.4")[1] < 0.3


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


@pytest.mark.browser
def test_in_the_browser_typos_slow_the_next_try_and_the_right_password_gets_in(login_app):
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS

    def submit(page, password) -> tuple[int, float]:
        """The answer's status, and when it came."""
        page.locator("#email").fill("dave")
        page.locator("#password").fill(password)
        with page.expect_response(lambda r: r.url.endswith("/login")) as answer:
            page.keyboard.press("Enter")
        return answer.value.status, time.perf_counter()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(login_app.app_url)
            typos = ["gilmore", "gilmor", "Gilmour", "gilmuor"]
            answers = [submit(page, typo) for typo in typos]
            assert [status for status, _ in answers] == [401] * len(typos)
            page.get_by_text("Unable to sign in").wait_for()
            status, answered = submit(page, "gilmour")
            # Checked only delay(4) after the last typo was (timed as in the test above).
            assert status == 200 and answered - answers[-1][1] >= POLICY.delay(len(typos)) - 0.05
            # Logged in: the chat opens (its engine is down, which it says).
            page.get_by_text("is not reachable").first.wait_for(timeout=30_000)
        finally:
            browser.close()
