"""Sign-in through a real OpenID Connect provider, the whole flow in a real Chromium: npm's
``oidc-provider`` (a certified implementation, installed under .cache/ from the registry) run
by ``tests/oidc/provider.mjs`` with its development login pages, one client and three users:
alice (an admin), bob (a user) and carol (outside the allowed group).  The chat runs with
saved chats on SQLite and passwords on as well, pointed at an engine port where nothing
listens: signing in, saved chats and roles need no replies."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from server.paths import ROOT
from server.stack.processes import free_port
from tests.support.screenshots import screenshot_path
from tests.support.settings import start_app
from tests.support.browser import USER

PROVIDER_DIR = ROOT / ".cache" / "oidc-provider"
CLIENT_ID, CLIENT_SECRET = "ernie-chat", "client-secret-for-tests"
PROVIDER_USERS = {
    "alice@example.com": {"name": "Alice", "groups": ["chat", "chat-admins"]},
    "bob@example.com": {"name": "Bob", "groups": ["/chat"]},  # a Keycloak-style full path
    "carol@example.com": {"name": "Carol", "groups": ["sales"]},
    # In the allowed group and domain, but the provider has not checked the address.
    "erin@example.com": {"name": "Erin", "groups": ["chat"], "email_verified": "false"},
    "frank@example.com": {"name": "Frank", "groups": ["chat"], "email_verified": None},
}


# --- the whole flow, in Chromium, against a real provider ------------------------------

@pytest.fixture(scope="session")
def oidc_package() -> Path:
    """npm's oidc-provider, installed under .cache/ from tests/oidc/package-lock.json (the whole
    tree pinned); it needs node 20 or later and npm."""
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout if shutil.which("node") else ""
    if not re.fullmatch(r"v(2\d|[3-9]\d)\..*\n?", node):
        pytest.fail(f"oidc-provider 9 needs Node.js 20 or later (found {node.strip() or 'none'}): "
                    "./scripts/test installs Debian's nodejs when none is there; Debian 12's is 18")
    PROVIDER_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json", "provider.mjs"):  # node resolves from the script's folder
        shutil.copy2(ROOT / "tests" / "oidc" / name, PROVIDER_DIR / name)  # keeps the mtime
    installed = PROVIDER_DIR / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < (PROVIDER_DIR / "package-lock.json").stat().st_mtime:
        if shutil.which("npm") is None:
            pytest.fail("npm is missing: ./scripts/test installs it (apt-get install npm)")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(PROVIDER_DIR)],
                       check=True, capture_output=True, timeout=600)
    return PROVIDER_DIR / "provider.mjs"


@pytest.fixture(scope="module")
def oidc_app(oidc_package, tmp_path_factory):
    """The provider, and the chat signing in through it: yields the chat's settings."""
    tmp = tmp_path_factory.mktemp("oidc")
    app_port, provider_port = free_port(), free_port()
    public_url = f"http://127.0.0.1:{app_port}"
    config = tmp / "provider.json"
    config.write_text(json.dumps({"port": provider_port, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                                  "redirect_uri": f"{public_url}/auth/oauth/SSO/callback",
                                  "users": PROVIDER_USERS}))
    provider = subprocess.Popen(["node", str(oidc_package), str(config)], stdout=subprocess.PIPE,
                                stderr=(tmp / "provider.log").open("w"), text=True)
    try:
        line = provider.stdout.readline()
        assert line.startswith("listening "), f"the provider did not start: {(tmp / 'provider.log').read_text()}"
        yield from start_app(tmp, app_port=app_port, engine_url=f"http://127.0.0.1:{free_port()}",
                             chat_db=tmp / "chats.db", users="dave:gilmour",
                             oidc_issuer=line.split()[1], oidc_client_id=CLIENT_ID,
                             oidc_client_secret=CLIENT_SECRET, public_url=public_url,
                             oidc_scopes="openid email profile groups", oidc_allowed_groups="chat",
                             oidc_allowed_domains="example.com", oidc_admin_group="chat-admins")
    finally:
        provider.terminate()
        provider.wait(10)


def sign_in(page_factory, settings, email, locale="en-US"):
    """A new browser signs in through the provider's pages as ``email``; returns its page."""
    page = page_factory(f"{settings.app_url}/login", locale)
    log_in_at_provider(page, email)
    return page


def log_in_at_provider(page, email):
    page.get_by_role("button", name=re.compile("SSO")).click()
    page.locator('input[name="login"]').fill(email)
    page.locator('input[name="password"]').fill("any password: the development pages take any")
    page.locator('button[type="submit"]').click()
    page.get_by_role("button", name="Continue").click()  # the provider's consent page


def current_user(page) -> dict:
    return page.evaluate("async () => (await fetch('/user')).json()")


def test_sign_in_saved_chats_roles_and_sign_out(oidc_app, page_factory):
    page = sign_in(page_factory, oidc_app, "alice@example.com")
    page.locator("#chat-input").wait_for(timeout=30_000)
    alice = current_user(page)
    assert alice["identifier"] == "alice@example.com" and alice["metadata"]["role"] == "admin", alice
    assert "groups" not in json.dumps(alice["metadata"]), "the token carries the role, not the groups"
    page.locator("#chat-input").fill("Alice's question about apricots")
    page.keyboard.press("Enter")
    page.locator(USER).get_by_text("apricots").wait_for(timeout=30_000)

    other = sign_in(page_factory, oidc_app, "bob@example.com")
    other.locator("#chat-input").wait_for(timeout=30_000)
    assert "role" not in current_user(other)["metadata"]  # not an admin
    other.locator("#chat-input").fill("Bob's question about bananas")
    other.keyboard.press("Enter")
    other.locator(USER).get_by_text("bananas").wait_for(timeout=30_000)

    # Each sees their own chat in the history, never the other's.
    for mine, theirs, where in (("apricots", "bananas", page), ("bananas", "apricots", other)):
        where.reload()
        where.locator("#thread-history").get_by_text(mine).first.wait_for(timeout=30_000)
        assert where.locator("#thread-history").get_by_text(theirs).count() == 0
    with sqlite3.connect(oidc_app.chat_db) as db:
        owners = dict(db.execute('SELECT name, "userIdentifier" FROM threads').fetchall())
    assert sorted(owners.values()) == ["alice@example.com", "bob@example.com"], owners

    # Sign out: back on the login page, and the old token no longer works.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "access_token")
    page.locator("#user-nav-button").click()
    page.get_by_role("menuitem", name=re.compile("Logout")).click()
    page.get_by_role("button", name=re.compile("SSO")).wait_for(timeout=30_000)
    assert httpx.get(f"{oidc_app.app_url}/user", cookies={"access_token": token}).status_code == 401


def test_a_user_outside_the_allowed_group_gets_a_page_that_says_so(oidc_app, page_factory):
    page = sign_in(page_factory, oidc_app, "carol@example.com")
    page.locator("#oidc-refused").wait_for(timeout=30_000)
    body = page.locator("body").inner_text()
    assert "carol@example.com" in body and "may not use this chat" in body, body
    assert current_user(page).get("identifier") is None, "no session was made"
    # Another account in the same browser: out of the provider's session first, as the page offers.
    page.get_by_role("link", name=re.compile("Sign out at the provider")).click()
    page.get_by_role("button", name="Yes, sign me out").click()
    page.get_by_text("Sign-out Success").wait_for(timeout=30_000)
    page.goto(f"{oidc_app.app_url}/login")
    log_in_at_provider(page, "bob@example.com")
    page.locator("#chat-input").wait_for(timeout=30_000)
    assert current_user(page)["identifier"] == "bob@example.com"

    chinese = sign_in(page_factory, oidc_app, "carol@example.com", locale="zh-CN")
    chinese.locator("#oidc-refused").wait_for(timeout=30_000)
    assert "无权使用此聊天" in chinese.locator("body").inner_text()


@pytest.mark.parametrize("email", ["erin@example.com", "frank@example.com"])
def test_an_address_the_provider_has_not_verified_does_not_get_in(oidc_app, page_factory, email):
    """email_verified as the string "false", or left out: the address decides here (the user
    claim and the domain rule), so only the provider's own true lets the user in."""
    page = sign_in(page_factory, oidc_app, email)
    page.locator("#oidc-refused").wait_for(timeout=30_000)
    assert "may not use this chat" in page.locator("body").inner_text()
    assert current_user(page).get("identifier") is None, "no session was made"


def test_the_sign_in_page_offers_the_provider_and_passwords(oidc_app, page_factory, tmp_path):
    page = page_factory(f"{oidc_app.app_url}/login")
    page.get_by_role("button", name="Continue with SSO").wait_for(timeout=30_000)
    page.locator("#password").wait_for()
    page.screenshot(path=screenshot_path("sign-in.png", tmp_path))
