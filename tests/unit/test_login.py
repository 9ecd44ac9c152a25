"""Login that resists guessing and locks nobody out: the throttle's schedule, its shared
store, then the real app's POST /login.

The app runs with lowered delays (0.4 s doubling to 1.6 s) so the timings stay short;
the defaults are checked by simulating attackers on the same throttle with a fake
clock.  Requests come from different loopback addresses (127.0.0.x), which is what the
app sees as different clients, directly or through HAProxy's X-Forwarded-For.
"""

from __future__ import annotations

import base64
import stat

import pytest

from app.auth.device_cookie import MAX_AGE_S, DeviceCookies
from app.auth.login_throttle import (
    ADDRESS_FREE_FAILURES, FREE_FAILURES, DelayPolicy, Plan, Policies, address_key, attempt_plan, forgive,
    schedule)
from server.auth_store import AuthStoreError, SqliteStore
from tests.support.login import FakeClock


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


def test_the_sqlite_store_is_private(tmp_path):
    SqliteStore(tmp_path / "data" / "auth.db")
    assert stat.S_IMODE((tmp_path / "data" / "auth.db").stat().st_mode) == 0o600


def test_a_file_that_is_not_a_database_is_refused_with_the_reason(tmp_path):
    bad = tmp_path / "auth.db"
    bad.write_text("not a database\n" * 100)
    with pytest.raises(AuthStoreError, match="ERNIE_AUTH_DB=.*auth.db cannot be used"):
        SqliteStore(bad)
    assert bad.read_text().startswith("not a database"), "left as it was"
