"""The login throttle through HAProxy and two app workers: a guesser keeps alice out neither on
her browser nor on a new one."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from app.auth import device_cookie
from tests.support.settings import start_balanced_app
from app.auth.login_throttle import ADDRESS_FREE_FAILURES
from tests.support.login import MAX_S, login_app_settings, login


@pytest.fixture(scope="module")
def balanced_login_app(tmp_path_factory):
    """Two app workers behind HAProxy, which tells them each client's address (forwardfor)."""
    tmp = tmp_path_factory.mktemp("balanced-login")
    yield from start_balanced_app(tmp, **login_app_settings(tmp, app_workers=2))


def test_a_guesser_keeps_alice_out_neither_on_her_browser_nor_on_a_new_one(balanced_login_app):
    """Someone guesses alice's password from one address, a guess every 0.5 s without
    waiting for answers (through HAProxy, so both workers take them); meanwhile alice
    signs in, from the browser she used before and from browsers she never used."""
    app = balanced_login_app
    status, _, earlier = login(app, "alice", "wonderland", "127.0.0.4")
    assert status == 200
    known = {device_cookie.COOKIE: earlier.cookies[device_cookie.COOKIE]}
    stop, guesses, refused = threading.Event(), [], threading.Event()

    def guesser():
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            sent = []
            while not stop.is_set():
                sent.append(pool.submit(login, app, "alice", "guess", "127.0.0.2"))
                sent[-1].add_done_callback(lambda f: not f.exception() and f.result()[0] == 429 and refused.set())
                time.sleep(0.5)
            guesses.extend(future.result()[0] for future in sent)
    attacker = threading.Thread(target=guesser)
    attacker.start()
    tries = []
    try:
        # His free guesses are spent: his keys slow him now.
        assert refused.wait(60), "the guesser was never refused"
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


def test_a_client_cannot_name_its_own_address_through_haproxy(balanced_login_app):
    """A guesser on this machine sends each guess with an X-Forwarded-For of its choosing, as
    if every guess came from a new address: HAProxy drops the header it sent (it is no trusted
    proxy), so the workers count every guess against its own address. From 127.0.0.1, since
    uvicorn believes the header from there (HAProxy's own address)."""
    source = "127.0.0.1"
    for i in range(ADDRESS_FREE_FAILURES + 3):
        spoofed = {"X-Forwarded-For": f"10.66.{i}.1"}
        assert login(balanced_login_app, f"nobody{i}", "guess", source, headers=spoofed)[0] == 401
    status, seconds, _ = login(balanced_login_app, "nobody", "guess", source, headers={"X-Forwarded-For": "10.66.99.1"})
    print(f"the next guess from the address waited {seconds:.2f} s")
    # Counted on its own address it waits up to MAX_S, less the time the guess before took
    # (0.4 s and more on busy cores); counted as a new address it would not wait at all.
    assert status == 401 and seconds >= MAX_S / 2, "each spoofed address was counted as another"
