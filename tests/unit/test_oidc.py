"""Sign-in through an OpenID Connect provider: who gets in and as what (``app/auth/oidc.py``), and the
whole flow in a real Chromium against a real provider.

The provider is npm's ``oidc-provider`` (a certified OpenID Connect implementation), run by
``tests/oidc/provider.mjs`` with its development login pages, one client and three users:
alice (an admin), bob (a user) and carol (outside the allowed group).  The chat runs with
saved chats on SQLite and passwords on as well, pointed at an engine port where nothing
listens: signing in, saved chats and roles need no replies.
"""

from __future__ import annotations

import time

import jwt
import pytest
from fastapi import HTTPException

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
    ({"email": "dave"}, "the name is a password user's (ERNIE_USERS)"),
])
def test_who_is_refused_and_why(changed, reason):
    verdict = decide(claims(**changed), RULES)
    assert isinstance(verdict, Refused) and verdict.reason == reason and verdict.key == "oidc_not_allowed"


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
