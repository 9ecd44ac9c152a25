"""Login that resists guessing and locks nobody out: the throttle's schedule, its shared
store, then the real app's POST /login.

The app runs with lowered delays (0.4 s doubling to 1.6 s) so the timings stay short;
the defaults are checked by simulating attackers on the same throttle with a fake
clock.  Requests come from different loopback addresses (127.0.0.x), which is what the
app sees as different clients, directly or through HAProxy's X-Forwarded-For.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import stat
import threading
import time

import httpx
import pytest

from app.auth import device_cookie
from app.auth.device_cookie import MAX_AGE_S, DeviceCookies
from app.auth.login_throttle import (ADDRESS_FREE_FAILURES, FREE_FAILURES, DelayPolicy, LoginThrottle, Plan,
                                     Policies, address_key, attempt_plan, forgive, schedule)
from server.auth_store import AuthStoreError, SqliteStore
from server.passwords import hash_password
from server.stack.processes import free_port
from tests.conftest import start_app, start_balanced_app


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


DEFAULTS = Policies.from_delays(1.0, 30.0, 600.0)  # the settings' defaults


def untrusted(user: str, address: str, policies: Policies = DEFAULTS) -> Plan:
    return attempt_plan(policies, user, address, device=None)


def sequential_guesses(states: dict, clock: FakeClock, n: int, plan: Plan) -> list[float]:
    """An attacker that sends the next guess as soon as the previous answer came: its waits."""
    waits = []
    for _ in range(n):
        wait = schedule(states, plan, clock.now).wait_s
        assert wait is not None, "a patient attacker is slowed, never refused"
        waits.append(wait)
        clock.now += wait + 0.01  # the answer comes 10 ms after the check starts
    return waits


def test_the_delay_doubles_after_the_free_failures_up_to_the_cap():
    policy = DelayPolicy(base_s=1, max_s=30)
    assert [policy.delay(n) for n in range(FREE_FAILURES + 1)] == [0.0] * (FREE_FAILURES + 1)
    assert [policy.delay(FREE_FAILURES + k) for k in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_thirty_wrong_guesses_take_minutes_with_the_defaults():
    clock, states = FakeClock(), {}
    waits = sequential_guesses(states, clock, 30, untrusted("alice", "10.0.0.1"))
    print(f"30 sequential guesses wait {sum(waits):.0f} s in all (default settings)")
    assert sum(waits) >= 10 * 60
    assert max(waits) <= DEFAULTS.user.max_s


def test_parallel_guesses_are_queued_or_refused_not_checked_at_once():
    clock, states = FakeClock(), {}
    plan = untrusted("alice", "10.0.0.1", Policies.from_delays(1, 4, 600))
    sequential_guesses(states, clock, FREE_FAILURES + 2, plan)         # the delay is 2 s now
    burst = [schedule(states, plan, clock.now) for _ in range(10)]     # ten at the same instant
    checked = [d.wait_s for d in burst if d.wait_s is not None]
    assert checked == sorted(checked) and len(set(checked)) == len(checked), burst
    assert len(checked) <= 3 and len(burst) - len(checked) >= 7, burst
    assert all(0 < d.retry_after_s <= 4 + 4 for d in burst if d.wait_s is None)


def test_a_success_forgives_the_pair_but_never_the_address_count():
    clock, states = FakeClock(), {}
    policies = Policies.from_delays(1, 30, 600)
    # Guessing many names from one address: the address key slows it after its free failures.
    for i in range(ADDRESS_FREE_FAILURES + 3):
        sequential_guesses(states, clock, 1, untrusted(f"user{i}", "10.0.0.1", policies))
    before = states[address_key("10.0.0.1")].failures
    # The guesser logs into his own account: his own count from there goes, the address's stays.
    own = untrusted("mallory", "10.0.0.1", policies)
    clock.now += schedule(states, own, clock.now).wait_s
    forgive(states, own, clock.now)
    assert f"pair:{address_key('10.0.0.1')}:mallory" not in states
    assert states[address_key("10.0.0.1")].failures == pytest.approx(before, rel=0.01)
    assert schedule(states, untrusted("someone", "10.0.0.1", policies), clock.now).wait_s > 0


def test_failures_fade_with_time():
    clock, states = FakeClock(), {}
    plan = untrusted("alice", "10.0.0.1", Policies.from_delays(1, 30, 60))
    sequential_guesses(states, clock, 8, plan)
    clock.now += 10 * 60  # ten half-lives: 8 failures decay to under one
    assert sequential_guesses(states, clock, 2, plan) == [0.0, 0.0]


def test_one_address_guessing_for_hours_never_slows_the_users_new_device():
    """The lenient user key, with the default settings: an attacker who sends each guess as
    soon as he may, for three hours; every five minutes the real user logs in from a
    browser he never used, elsewhere, and is checked at once."""
    clock, states = FakeClock(), {}
    attack, started, signed_in = untrusted("alice", "10.0.0.1"), clock.now, 0
    while clock.now - started < 3 * 3600:
        sequential_guesses(states, clock, 1, attack)
        if clock.now - started >= 300 * (signed_in + 1):
            alice = untrusted("alice", f"10.9.{signed_in // 250}.{signed_in % 250}")
            assert schedule(states, alice, clock.now).wait_s == 0.0, (clock.now - started)
            forgive(states, alice, clock.now)
            signed_in += 1
    assert signed_in == 36
    assert states["newdev:alice"].failures < DEFAULTS.new_device_user.free_failures


def test_many_addresses_can_stall_new_devices_but_never_a_known_one():
    clock, states = FakeClock(), {}
    attackers = [untrusted("alice", f"10.0.1.{i}") for i in range(20)]
    refused = 0
    for _ in range(60):  # a minute in which each of 20 addresses guesses every second
        for plan in attackers:
            refused += schedule(states, plan, clock.now).wait_s is None
        clock.now += 1
    new_device = schedule(states, untrusted("alice", "10.9.0.1"), clock.now)
    assert refused > 0 and (new_device.wait_s is None or new_device.wait_s > 0)
    known = attempt_plan(DEFAULTS, "alice", "10.9.0.1", device="d3v1ce")
    assert schedule(states, known, clock.now).wait_s == 0.0


def test_an_ipv6_client_is_one_address_per_slash_64():
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1") == "addr:2001:db8::/64"
    assert address_key("2001:db8:0:1::1") != address_key("2001:db8::1")
    assert address_key("::ffff:10.0.0.1") == address_key("10.0.0.1") == "addr:10.0.0.1"


def test_a_device_cookie_is_trusted_only_for_its_user_unaltered_and_unexpired():
    cookies = DeviceCookies("secret")
    value = cookies.make("alice", now=1000)
    device = cookies.device_of(value, "alice", now=1001)
    assert device and cookies.device_of(cookies.make("alice", device), "alice") == device
    assert cookies.device_of(value, "bob", now=1001) is None
    assert DeviceCookies("another install").device_of(value, "alice", now=1001) is None
    payload, _, signature = value.partition(".")
    forged = base64.urlsafe_b64encode(base64.urlsafe_b64decode(payload + "==").replace(
        b'"alice"', b'"bob"')).rstrip(b"=").decode()
    assert cookies.device_of(f"{forged}.{signature}", "bob", now=1001) is None
    assert cookies.device_of(value, "alice", now=1000 + MAX_AGE_S + 1) is None
    assert cookies.device_of("garbage", "alice") is None and cookies.device_of(None, "alice") is None


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


def test_the_sqlite_store_is_private(tmp_path):
    SqliteStore(tmp_path / "data" / "auth.db")
    assert stat.S_IMODE((tmp_path / "data" / "auth.db").stat().st_mode) == 0o600


def test_a_file_that_is_not_a_database_is_refused_with_the_reason(tmp_path):
    bad = tmp_path / "auth.db"
    bad.write_text("not a database\n" * 100)
    with pytest.raises(AuthStoreError, match="ERNIE_AUTH_DB=.*auth.db cannot be used"):
        SqliteStore(bad)
    assert bad.read_text().startswith("not a database"), "left as it was"


# --- the real app: POST /login ----------------------------------------------------------

BASE_S, MAX_S = 0.4, 1.6
POLICY = Policies.from_delays(BASE_S, MAX_S, 600).user
USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet", "dave": "gilmour"}
# 2^4 rounds: the same bcrypt path, but 1 ms a check, so the timings show the delays.
HASHED_USERS = ",".join(f"{name}:{hash_password(pw, rounds=4)}" for name, pw in USERS.items())


def login_app_settings(tmp, **overrides) -> dict:
    return dict(engine_url=f"http://127.0.0.1:{free_port()}", users=HASHED_USERS,
                login_delay_base_s=BASE_S, login_delay_max_s=MAX_S, **overrides)


@pytest.fixture(scope="module")
def login_app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("login")
    yield from start_app(tmp, **login_app_settings(tmp, chat_db=tmp / "chats.db"))


@pytest.fixture(scope="module")
def balanced_login_app(tmp_path_factory):
    """Two app workers behind HAProxy, which tells them each client's address (forwardfor)."""
    tmp = tmp_path_factory.mktemp("balanced-login")
    yield from start_balanced_app(tmp, **login_app_settings(tmp, app_workers=2))


def login(settings, user, password, source="127.0.0.1", headers=None,
          cookies=None) -> tuple[int, float, httpx.Response]:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30, headers=headers, cookies=cookies) as http:
        start = time.perf_counter()
        response = http.post(f"{settings.app_url}/login", data={"username": user, "password": password})
        return response.status_code, time.perf_counter() - start, response


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
    assert status == 401 and seconds >= MAX_S - 0.4, "the address's count was cleared"


def test_a_guesser_keeps_alice_out_neither_on_her_browser_nor_on_a_new_one(balanced_login_app):
    """Someone guesses alice's password from one address, a guess every 0.5 s without
    waiting for answers (through HAProxy, so both workers take them); meanwhile alice
    signs in, from the browser she used before and from browsers she never used."""
    app = balanced_login_app
    status, _, earlier = login(app, "alice", "wonderland", "127.0.0.4")
    assert status == 200
    known = {device_cookie.COOKIE: earlier.cookies[device_cookie.COOKIE]}
    stop, guesses = threading.Event(), []

    def guesser():
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            sent = []
            while not stop.is_set():
                sent.append(pool.submit(login, app, "alice", "guess", "127.0.0.2"))
                time.sleep(0.5)
            guesses.extend(future.result()[0] for future in sent)
    attacker = threading.Thread(target=guesser)
    attacker.start()
    tries = []
    try:
        time.sleep(5)  # his free guesses are spent: his keys slow him now
        for i in range(4):
            tries.append(("known", *login(app, "alice", "wonderland", "127.0.0.4", cookies=known)[:2]))
            tries.append(("new", *login(app, "alice", "wonderland", f"127.0.0.{30 + i}")[:2]))
            time.sleep(1.3)
    finally:
        stop.set()
        attacker.join()
    print("alice:", [(kind, status, f"{s:.2f}") for kind, status, s in tries],
          "guesser:", {code: guesses.count(code) for code in set(guesses)})
    assert guesses.count(429) >= 5 and set(guesses) <= {401, 429}, "the guesser is throttled"
    assert all(status == 200 and seconds < 1.0 for _, status, seconds in tries), tries


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
        assert status == 401 and seconds >= MAX_S - 0.3, f"{seconds:.2f} s: the count was lost"
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
