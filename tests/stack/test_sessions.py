"""Sessions that end: a logged-out, signed-out, removed or re-passworded user's token is
refused by every app worker, on REST routes, on the websocket and for renewal.

The app runs as two workers sharing one login store (ERNIE_AUTH_DB), and a third
process plays the same install restarted with ERNIE_USERS changed.  Each attack
replays a login's token, as a copied cookie would be, on the worker that did not
issue it too.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jwt
import pytest

from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.passwords import hash_password
from server.paths import ROOT
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.support.settings import engine_settings, start_app

USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet", "dave": "gilmour"}
LIFETIME_S = 3600


def hashed(users: dict[str, str]) -> str:
    return ",".join(f"{name}:{hash_password(pw, rounds=4)}" for name, pw in users.items())


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("sessions-store") / "auth.db"


@pytest.fixture(scope="module")
def users():
    return hashed(USERS)


@pytest.fixture(scope="module")
def workers(tmp_path_factory, store, users):
    """Two workers of one install (HAProxy in front, which these tests go around)."""
    tmp = tmp_path_factory.mktemp("sessions")
    stack = Stack(engine_settings(tmp, engine_url=f"http://127.0.0.1:{free_port()}", users=users,
                                  app_workers=2, auth_db=store, session_lifetime_s=LIFETIME_S), root=ROOT)
    try:
        stack.plan()
        stack.start_balancer()
        stack.start_app()
        yield [worker.url for worker in stack.apps.workers], tmp
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def changed_app(tmp_path_factory, store, users):
    """The same install after an edit of ERNIE_USERS: alice has a new password, bob is gone."""
    kept = dict(pair.split(":", 1) for pair in users.split(","))
    changed = {"alice": hash_password("new password", rounds=4), "carol": kept["carol"], "dave": kept["dave"]}
    yield from start_app(tmp_path_factory.mktemp("changed"), engine_url=f"http://127.0.0.1:{free_port()}",
                         users=",".join(f"{k}:{v}" for k, v in changed.items()), auth_db=store)


def login(url: str, user: str) -> str:
    response = httpx.post(f"{url}/login", data={"username": user, "password": USERS[user]}, timeout=30)
    assert response.status_code == 200, response.text
    return response.cookies["access_token"]


def rest_status(url: str, token: str) -> int:
    return httpx.get(f"{url}/user", cookies={"access_token": token}, timeout=30).status_code


def renewal_status(url: str, token: str) -> int:
    return httpx.post(f"{url}/auth/jwt", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code


def socket_refused(url: str, token: str) -> bool:
    """Does the app refuse the websocket connect (the browser's chat) with this token?"""
    async def connect() -> str:
        chat = ChatSession(SessionRecord(0, "", ""))
        try:
            await chat.open(url, headers={"Cookie": f"access_token={token}"})
        finally:
            await chat.close()
        return chat.record.error
    # A thread of its own: Playwright's sync API holds this thread's event loop in a browser test.
    with ThreadPoolExecutor(1) as pool:
        error = pool.submit(asyncio.run, connect()).result()
    return error.startswith("the app refused the connection")


def next_second() -> None:
    """Until the clock is in its next whole second."""
    now = int(time.time())
    while int(time.time()) == now:
        time.sleep(0.01)


def revoke_sessions(store, name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ERNIE_AUTH_DB": str(store), "ERNIE_USERS": "alice:x"}
    return subprocess.run([sys.executable, "-m", "server.cli", "revoke-sessions", name], env=env,
                          cwd=store.parent, capture_output=True, text=True, timeout=60)


def test_a_logged_out_token_is_refused_by_every_worker(workers):
    (first, second), tmp = workers
    token = login(first, "alice")
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == LIFETIME_S, "ERNIE_SESSION_LIFETIME_S sets the lifetime"
    assert rest_status(second, token) == 200 and not socket_refused(second, token)

    logout = httpx.post(f"{first}/logout", cookies={"access_token": token}, timeout=30)
    assert logout.status_code == 200
    # The copied cookie, replayed: on both workers, REST, websocket and renewal.
    assert rest_status(first, token) == 401 and rest_status(second, token) == 401
    assert socket_refused(second, token)
    fresh = login(second, "alice")  # at once: within the same second, as a quick re-login may be
    assert rest_status(first, fresh) == 200
    # No renewal at all: a token renewed before its logout would not be the one revoked.
    assert renewal_status(second, token) == 404 and renewal_status(first, fresh) == 404
    logs = "".join(path.read_text() for path in tmp.glob("app*.log"))
    assert "logged out" in logs and token not in logs and fresh not in logs, "no token in the logs"


def test_revoke_sessions_signs_a_user_out_on_every_worker(workers, store):
    (first, second), _ = workers
    carol = [login(first, "carol"), login(second, "carol")]
    dave = login(second, "dave")
    next_second()  # a token's issue time is in whole seconds: one of the same second goes too

    done = revoke_sessions(store, "carol")
    assert done.returncode == 0, done.stderr
    assert "Signed carol out everywhere" in done.stdout and str(store) in done.stdout
    for token in carol:
        assert [rest_status(url, token) for url in (first, second)] == [401, 401]
    assert socket_refused(first, carol[0])
    assert rest_status(first, dave) == 200, "other users keep their sessions"
    next_second()
    assert rest_status(second, login(first, "carol")) == 200, "carol can log in again"

    unknown = revoke_sessions(store, "zed")
    assert unknown.returncode == 0 and "zed is not in ERNIE_USERS" in unknown.stderr


def test_a_removed_user_or_a_changed_password_loses_access(workers, changed_app):
    (first, _), _ = workers
    alice, bob, dave = login(first, "alice"), login(first, "bob"), login(first, "dave")
    url = changed_app.app_url
    for token in (alice, bob):  # alice's password changed, bob was removed
        assert rest_status(url, token) == 401
        assert socket_refused(url, token)
    assert rest_status(url, dave) == 200 and not socket_refused(url, dave), "unchanged users stay"
    # Chainlit still accepts their tokens where ERNIE_USERS is as it was: the check is the change.
    assert rest_status(first, alice) == 200 and rest_status(first, bob) == 200


def test_logging_out_in_the_browser_ends_the_session_its_cookie_had(workers, new_page):
    """The chat's own Logout (user menu): a copy of the cookie taken before is refused after."""
    (first, second), _ = workers
    page = new_page()
    page.goto(first)
    page.locator("#email").fill("bob")
    page.locator("#password").fill(USERS["bob"])
    page.keyboard.press("Enter")
    page.locator("#user-nav-button").wait_for(timeout=30_000)
    copied = next(c["value"] for c in page.context.cookies() if c["name"] == "access_token")
    assert rest_status(second, copied) == 200
    page.locator("#user-nav-button").click()
    with page.expect_response(lambda r: r.url.endswith("/logout")) as answer:
        page.get_by_text("Logout").click()
    assert answer.value.status == 200
    assert rest_status(first, copied) == 401 and rest_status(second, copied) == 401
    assert socket_refused(second, copied)
