"""Sign-in through an OpenID Connect provider: who gets in and as what (``app/auth/oidc.py``), and the
whole flow in a real Chromium against a real provider.

The provider is npm's ``oidc-provider`` (a certified OpenID Connect implementation), run by
``tests/oidc/provider.mjs`` with its development login pages, one client and three users:
alice (an admin), bob (a user) and carol (outside the allowed group).  The chat runs with
saved chats on SQLite and passwords on as well, pointed at an engine port where nothing
listens: signing in, saved chats and roles need no replies.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from fastapi import HTTPException

from app.auth import oidc
from app.auth.auth_sessions import Sessions
from app.auth.oidc import Admitted, OidcProvider, Refused, Rules, decide, refusal_page
from server.auth_store import open_store
from server.oidc_discovery import OidcError, discover, endpoints_from
from server.paths import ROOT
from server.settings import SettingsError, load_settings
from server.stack.engine_tier import StartupFailed
from server.stack.processes import free_port
from server.stack.supervisor import Stack

RULES = Rules(user_claim="email", groups_claim="groups", domains=("example.com",), groups=("chat",),
              admin_group="chat-admins", password_users=frozenset({"dave"}))


# --- who gets in -----------------------------------------------------------------------

def claims(**extra):
    return {"sub": "1", "email": "alice@example.com", "email_verified": True, "groups": ["chat"], **extra}


def test_a_member_of_an_allowed_group_gets_in_and_an_admin_group_makes_an_admin():
    assert decide(claims(), RULES) == Admitted("alice@example.com", None, admin=False)
    assert decide(claims(groups=["chat", "chat-admins"], name="Alice"), RULES) == \
        Admitted("alice@example.com", "Alice", admin=True)
    assert decide(claims(groups="/chat"), RULES).admin is False, "one string, a full path"
    assert decide(claims(email=" Alice@Example.COM"), RULES).identifier == "alice@example.com"


@pytest.mark.parametrize("changed, reason", [
    ({"groups": ["sales"]}, "in none of the groups chat"),
    ({"groups": None}, "in none of the groups chat"),
    ({"email": "alice@elsewhere.org"}, "e-mail domain not in example.com"),
    ({"email": "alice@example.com.evil.org"}, "e-mail domain not in example.com"),
    ({"email_verified": False}, "e-mail not verified by the provider"),
    ({"email_verified": "false"}, "e-mail not verified by the provider"),   # a string is no true
    ({"email_verified": None}, "e-mail not verified by the provider"),
    ({"email": "dave"}, "the name is a password user's (ERNIE_USERS)"),
])
def test_who_is_refused_and_why(changed, reason):
    verdict = decide(claims(**changed), RULES)
    assert isinstance(verdict, Refused) and verdict.reason == reason and verdict.key == "oidc_not_allowed"


def test_an_unverified_address_is_refused_only_where_the_address_decides():
    unverified = {k: v for k, v in claims().items() if k != "email_verified"}
    assert isinstance(decide(unverified, RULES), Refused)
    by_name = dataclasses.replace(RULES, user_claim="preferred_username", domains=())
    assert decide({**unverified, "preferred_username": "alice"}, by_name).identifier == "alice"


def test_a_provider_that_does_not_name_the_user_is_refused_with_its_own_text():
    verdict = decide({"sub": "1", "groups": ["chat"]}, RULES)
    assert verdict == Refused("", "no 'email' claim", "oidc_no_name")


def test_the_refusal_page_names_the_user_escaped_in_their_language():
    page = refusal_page("zh", Refused("<b>x</b>@example.com", "r", "oidc_not_allowed"), None).decode()
    assert "无权使用此聊天" in page and "&lt;b&gt;x&lt;/b&gt;@example.com" in page
    assert "<b>x</b>" not in page


# --- the provider's discovery document -------------------------------------------------

ISSUER = "https://sso.example.com/realms/staff"
DOCUMENT = {"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/auth", "token_endpoint": f"{ISSUER}/token",
            "userinfo_endpoint": f"{ISSUER}/userinfo"}


def test_a_discovery_document_gives_the_endpoints():
    assert endpoints_from(DOCUMENT, ISSUER).token == f"{ISSUER}/token"
    # Authentik's issuers end in a slash: ID tokens are checked against it as spelled there.
    assert endpoints_from({**DOCUMENT, "issuer": ISSUER + "/"}, ISSUER).issuer == ISSUER + "/"


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("changed, says", [
    ({}, None),
    ({"aud": "another-client"}, "Audience doesn't match"),
    ({"iss": "https://evil.example.com"}, "Invalid issuer"),
    ({"exp": time.time() - 120}, "expired"),
])
def test_an_id_token_for_another_client_issuer_or_time_is_refused(changed, says):
    settings = load_settings(oidc_issuer=ISSUER, oidc_client_id="chat", oidc_client_secret="s",
                             public_url="https://chat.example.com")
    provider = OidcProvider(settings, endpoints_from(DOCUMENT, ISSUER))
    token = jwt.encode({"iss": ISSUER, "aud": "chat", "sub": "1", "exp": time.time() + 60, **changed}, "k" * 32)
    if says is None:
        assert provider.id_token_claims(token)["sub"] == "1"
        return
    with pytest.raises(HTTPException, match=says):
        provider.id_token_claims(token)


class Userinfo(BaseHTTPRequestHandler):
    """The provider's userinfo endpoint, answering about subject 1. A stand-in in this thread:
    a real provider's ID tokens always name their subject, so it cannot send one without."""

    def do_GET(self):
        body = json.dumps({"sub": "1", "email": "alice@example.com"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.usefixtures("clean_env")
async def test_userinfo_is_taken_only_about_the_id_tokens_named_subject():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Userinfo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = load_settings(oidc_issuer=ISSUER, oidc_client_id="chat", oidc_client_secret="s",
                                 public_url="https://chat.example.com")
        endpoints = dataclasses.replace(endpoints_from(DOCUMENT, ISSUER),
                                        userinfo=f"http://127.0.0.1:{server.server_address[1]}/userinfo")
        provider = OidcProvider(settings, endpoints)
        for id_claims, refusal in (({"sub": "1"}, None), ({}, "names no subject"), ({"sub": ""}, "names no subject"),
                                   ({"sub": "2"}, "not about the ID token's subject")):
            oidc._ID_CLAIMS.set(id_claims)
            if refusal is None:
                claims, user = await provider.get_user_info("token")
                assert user.identifier == "1" and claims["email"] == "alice@example.com"
            else:
                with pytest.raises(HTTPException, match=refusal):
                    await provider.get_user_info("token")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("document, says", [
    ({**DOCUMENT, "issuer": "https://sso.example.com/realms/other"}, "names the issuer"),
    ({k: v for k, v in DOCUMENT.items() if k != "userinfo_endpoint"}, "lacks userinfo_endpoint"),
    (["not", "an", "object"], "not an OpenID Connect discovery document"),
])
def test_a_wrong_discovery_document_is_refused_clearly(document, says):
    with pytest.raises(OidcError, match=says):
        endpoints_from(document, ISSUER)


def test_an_unreachable_issuer_is_a_clear_error():
    with pytest.raises(OidcError, match="cannot reach the OpenID Connect provider at http://127.0.0.1"):
        discover(f"http://127.0.0.1:{free_port()}")


@pytest.mark.usefixtures("clean_env")
def test_up_stops_before_starting_anything_when_the_issuer_is_unreachable():
    issuer = f"http://127.0.0.1:{free_port()}"
    settings = load_settings(oidc_issuer=issuer, oidc_client_id="chat", oidc_client_secret="s",
                             public_url="https://chat.example.com", engine_url="http://127.0.0.1:1")
    with pytest.raises(StartupFailed, match=f"cannot reach the OpenID Connect provider at {issuer}"):
        Stack(settings, root=ROOT).check_before_start()


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("issuer, taken", [
    ("http://sso.example.com/realms/staff", False), ("http://10.0.0.5:8080", False),
    ("http://localhost:8080", True), ("http://127.0.0.1:9000/x", True), ("http://[::1]:9000", True),
    ("https://sso.example.com", True)])
def test_a_plain_http_issuer_is_taken_only_on_this_machine(issuer, taken):
    def load():
        return load_settings(oidc_issuer=issuer, oidc_client_id="chat", oidc_client_secret="s",
                             public_url="https://chat.example.com", chat_db="chats.db")
    if taken:
        assert load().oidc_issuer == issuer
    else:
        with pytest.raises(SettingsError, match="plain http: anyone on the way could answer"):
            load()


@pytest.mark.usefixtures("clean_env")
def test_an_issuer_needs_its_client_and_the_public_url():
    with pytest.raises(SettingsError, match="ERNIE_OIDC_CLIENT_SECRET, ERNIE_PUBLIC_URL"):
        load_settings(oidc_issuer=ISSUER, oidc_client_id="chat")
    with pytest.raises(SettingsError, match="ERNIE_OIDC_NAME"):
        load_settings(oidc_name="a b")
    settings = load_settings(oidc_issuer=ISSUER + "/", oidc_client_id="chat", oidc_client_secret="s",
                             public_url="https://chat.example.com", chat_db="chats.db")
    assert settings.oidc_issuer == ISSUER and settings.login_on, "saved chats need no ERNIE_USERS"


async def test_a_provider_sign_in_is_due_again_after_the_recheck_time(tmp_path):
    sessions = Sessions(open_store(None, tmp_path / "auth.db"), {"dave": "x"}, "s" * 32, oidc_recheck_s=600)
    fresh = {"identifier": "bob@example.com", "iat": int(time.time()), "metadata": sessions.oidc_metadata(admin=False)}
    stale = {**fresh, "metadata": {**fresh["metadata"], "signed_in": time.time() - 601}}
    assert await sessions.refusal("token", fresh) is None
    assert "due again" in await sessions.refusal("token", stale)
    assert await sessions.refusal("token", {**fresh, "identifier": "dave"}) == "the name is now a password user's"
    sessions.oidc_recheck_s = None  # ERNIE_OIDC_ISSUER unset since
    assert await sessions.refusal("token", fresh) == "sign-in through the provider is off"
