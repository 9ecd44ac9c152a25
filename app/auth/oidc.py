"""Sign-in through an OpenID Connect provider, on Chainlit's own OAuth routes.

Chainlit 2.12 runs the authorization-code flow (``/auth/oauth/<name>`` and its
``/callback``, ``chainlit/server.py``): it makes the ``state``, keeps it in a cookie and
checks it on the way back, and hands the code to a provider object.  Its generic provider
reads fixed endpoints from OAUTH_GENERIC_* variables, drops the ID token and names users
by one claim; this one takes the endpoints from the issuer's discovery document at start,
keeps the ID token's claims (Entra ID puts groups only there) and leaves the decision to
``decide``: who the user is, whether their e-mail domain and groups let them in, whether
they are an admin.

The ID token comes straight from the token endpoint over the connection the app opened,
so its signature is not checked (OpenID Connect Core 3.1.3.7: TLS to the token endpoint
vouches for it); its issuer, audience and expiry are.

A refused user gets a page of their own (403, in their language) instead of Chainlit's
"Sign in failed" on the login page: the callback cannot shape the response, so, as in
``app/auth/login.py``, a pure ASGI middleware hands it a holder in a ContextVar and rewrites the
answer when the callback marked a refusal.  Tokens are never logged.
"""

from __future__ import annotations

import html
import logging
import os
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional, Union
from urllib.parse import quote, urlencode

import chainlit as cl
import chainlit.oauth_providers as chainlit_providers
import httpx
import jwt as pyjwt
from chainlit.oauth_providers import OAuthProvider
from fastapi import HTTPException

from app import chat_metrics, chat_records
from app.auth.auth_sessions import Sessions
from app.texts import lang_of, text
from server.chat_records import SIGN_IN, SIGN_IN_REFUSED
from server.oidc_discovery import TIMEOUT_S, Endpoints, OidcError, discover
from server.settings import Settings

log = logging.getLogger(__name__)

# --- who may sign in -------------------------------------------------------------------

@dataclass(frozen=True)
class Rules:
    user_claim: str
    groups_claim: str
    domains: tuple[str, ...]
    groups: tuple[str, ...]
    admin_group: Optional[str]
    password_users: frozenset[str]

    @classmethod
    def of(cls, settings: Settings) -> "Rules":
        return cls(settings.oidc_user_claim, settings.oidc_groups_claim, settings.oidc_domains,
                   settings.oidc_groups, settings.oidc_admin_group, frozenset(settings.user_passwords))


@dataclass(frozen=True)
class Admitted:
    identifier: str
    display_name: Optional[str]
    admin: bool


@dataclass(frozen=True)
class Refused:
    name: str    # whom the provider said, for the page and the log ("" when it said no one)
    reason: str  # for the log
    key: str     # the page's text (app/texts/)


def group_names(value: object) -> set[str]:
    """A groups claim as names: a list or one string; Keycloak's full paths ("/staff") count
    as their names too."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return {name for item in items if isinstance(item, str) and item
            for name in (item, item.lstrip("/"))}


def decide(claims: dict, rules: Rules) -> Union[Admitted, Refused]:
    """Whether the user the provider vouched for may use the chat, and as what."""
    name = claims.get(rules.user_claim)
    if not isinstance(name, str) or not name.strip():
        return Refused("", f"no {rules.user_claim!r} claim", "oidc_no_name")
    email = claims.get("email").strip().lower() if isinstance(claims.get("email"), str) else ""
    # One mailbox, one name (and one set of saved chats), however the provider capitalises it.
    name = email if rules.user_claim == "email" else name.strip()
    # Someone whose address the provider has not checked could claim anyone's: where the
    # address decides, only the provider's own true counts (not "false", not a missing claim).
    if claims.get("email_verified") is not True and (rules.user_claim == "email" or rules.domains):
        return Refused(name, "e-mail not verified by the provider", "oidc_not_allowed")
    if name in rules.password_users:
        return Refused(name, "the name is a password user's (ERNIE_USERS)", "oidc_not_allowed")
    if rules.domains and email.rpartition("@")[2] not in rules.domains:
        return Refused(name, f"e-mail domain not in {', '.join(rules.domains)}", "oidc_not_allowed")
    groups = group_names(claims.get(rules.groups_claim))
    if rules.groups and not groups & set(rules.groups):
        return Refused(name, f"in none of the groups {', '.join(rules.groups)}", "oidc_not_allowed")
    display = claims.get("name") if isinstance(claims.get("name"), str) else None
    return Admitted(name, display, rules.admin_group is not None and rules.admin_group in groups)


# --- the provider Chainlit talks to --------------------------------------------------

_ID_CLAIMS: ContextVar[dict] = ContextVar("oidc_id_claims", default={})


class OidcProvider(OAuthProvider):
    """Chainlit's provider interface over the discovered endpoints."""

    env: list = []

    def __init__(self, settings: Settings, endpoints: Endpoints):
        self.id = settings.oidc_name
        self.client_id = settings.oidc_client_id
        self.client_secret = settings.oidc_client_secret.get_secret_value()
        self.endpoints = endpoints
        self.authorize_url = endpoints.authorize
        self.authorize_params = {"scope": settings.oidc_scopes, "response_type": "code"}

    def is_configured(self) -> bool:
        return True

    async def get_raw_token_response(self, code: str, url: str) -> dict:
        # client_secret_basic, the spec's default, with the form-encoding RFC 6749 2.3.1 asks for.
        auth = (quote(self.client_id, safe=""), quote(self.client_secret, safe=""))
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            response = await http.post(self.endpoints.token, auth=auth, data={
                "grant_type": "authorization_code", "code": code, "redirect_uri": url})
        if response.status_code != 200:
            # The body names the OAuth error (invalid_grant ...); it holds no token.
            raise HTTPException(status_code=400, detail=f"the token endpoint answered "
                                f"{response.status_code}: {response.text[:200]}")
        return response.json()

    async def get_token(self, code: str, url: str) -> str:
        answer = await self.get_raw_token_response(code, url)
        if not isinstance(answer.get("access_token"), str):
            raise HTTPException(status_code=400, detail="the token endpoint sent no access token")
        _ID_CLAIMS.set(self.id_token_claims(answer.get("id_token")))
        return answer["access_token"]

    def id_token_claims(self, id_token: object) -> dict:
        if not isinstance(id_token, str):
            raise HTTPException(status_code=400, detail="the token endpoint sent no ID token "
                                "(is openid in ERNIE_OIDC_SCOPES?)")
        try:
            return pyjwt.decode(id_token, options={"verify_signature": False, "verify_aud": True,
                                                   "verify_iss": True, "verify_exp": True},
                                audience=self.client_id, issuer=self.endpoints.issuer, leeway=60)
        except pyjwt.InvalidTokenError as exc:
            raise HTTPException(status_code=400, detail=f"unusable ID token: {exc}") from None

    async def get_user_info(self, token: str):
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            response = await http.get(self.endpoints.userinfo, headers={"Authorization": f"Bearer {token}"})
        response.raise_for_status()
        userinfo = response.json()
        id_claims = _ID_CLAIMS.get()
        # OpenID Connect Core 2: an ID token names its subject; without one, userinfo could be
        # about anyone. 5.3.2: userinfo about another subject must not be used.
        if not isinstance(id_claims.get("sub"), str) or not id_claims["sub"]:
            raise HTTPException(status_code=400, detail="the ID token names no subject (sub)")
        if not isinstance(userinfo, dict) or userinfo.get("sub") != id_claims.get("sub"):
            raise HTTPException(status_code=400, detail="userinfo is not about the ID token's subject")
        claims = {**id_claims, **userinfo}
        return claims, cl.User(identifier=str(claims.get("sub")), metadata={"provider": self.id})


# --- the refusal page ----------------------------------------------------------------

@dataclass
class Callback:
    """One return from the provider, as the middleware sees it."""

    lang: str
    address: str = "unknown"  # the client's, for the audit
    refused: Optional[Refused] = None


_CALLBACK: ContextVar[Optional[Callback]] = ContextVar("oidc_callback", default=None)


def refusal_page(lang: str, refused: Refused, end_session: Optional[str]) -> bytes:
    says = text(lang, refused.key, name=html.escape(refused.name))
    links = [f'<a href="/login">{text(lang, "oidc_try_again")}</a>']
    if end_session:
        links.append(f'<a href="{html.escape(end_session)}">{text(lang, "oidc_provider_sign_out")}</a>')
    return (f'<!DOCTYPE html><html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width"><title>{text(lang, "oidc_refused_title")}'
            f'</title></head><body style="font-family:sans-serif;max-width:36em;margin:4em auto;padding:0 1em">'
            f'<h1 id="oidc-refused">{text(lang, "oidc_refused_title")}</h1><p>{says}</p>'
            f'<p>{" · ".join(links)}</p></body></html>').encode()


class RefusalPage:
    """Pure ASGI middleware: a refused provider sign-in gets a page saying why, not a redirect
    to Chainlit's generic "Sign in failed"."""

    def __init__(self, app, callback_path: str, end_session: Optional[str]):
        self.app, self.callback_path, self.end_session = app, callback_path, end_session

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != self.callback_path:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        callback = Callback(lang_of(headers.get(b"accept-language", b"").decode("latin-1")),
                            chat_records.address(scope))
        token = _CALLBACK.set(callback)
        try:
            await self.app(scope, receive, self._answering(callback, send))
        finally:
            _CALLBACK.reset(token)

    def _answering(self, callback: Callback, send):
        async def wrapped(message):
            if callback.refused is None:
                await send(message)
            elif message["type"] == "http.response.start":
                body = refusal_page(callback.lang, callback.refused, self.end_session)
                await send({"type": "http.response.start", "status": 403, "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store")]})
                await send({"type": "http.response.body", "body": body})
            # the redirect's own body is dropped
        return wrapped


def make_callback(rules: Rules, sessions: Sessions, provider_name: str):
    async def on_oauth(provider_id: str, token: str, claims: dict, default_user: cl.User) -> Optional[cl.User]:
        if provider_id != provider_name:
            return None
        verdict = decide(claims, rules)
        callback = _CALLBACK.get() or Callback("en")
        if isinstance(verdict, Refused):
            log.warning("refused the sign-in of %r through %s: %s", verdict.name[:64], provider_id,
                        verdict.reason)
            chat_metrics.login_failed("provider_refused")
            callback.refused = verdict
            # The provider's claim, not a typed name: no password can be in it.
            chat_records.audit(SIGN_IN_REFUSED, verdict.name, callback.address, "oidc")
            return None
        chat_records.audit(SIGN_IN, verdict.identifier, callback.address, "oidc")
        return cl.User(identifier=verdict.identifier, display_name=verdict.display_name,
                       metadata=sessions.oidc_metadata(verdict.admin))
    return on_oauth


def install(settings: Settings, sessions: Sessions) -> None:
    """Offer sign-in through the provider; call at import time of the Chainlit app, after
    ``auth_sessions.start``.  Raises OidcError when the issuer cannot be used."""
    from chainlit.server import app

    if any(p.id == settings.oidc_name for p in chainlit_providers.providers):
        raise OidcError(f"ERNIE_OIDC_NAME={settings.oidc_name} is the name of one of Chainlit's "
                        "own providers: choose another (e.g. SSO)")
    endpoints = discover(settings.oidc_issuer)
    # Chainlit builds redirect_uri from CHAINLIT_URL; unset, from the request's Host header.
    os.environ["CHAINLIT_URL"] = settings.public_url
    # First, so that Chainlit finds it under its name before any of its own.
    chainlit_providers.providers.insert(0, OidcProvider(settings, endpoints))
    end_session = (f"{endpoints.end_session}?{urlencode({'client_id': settings.oidc_client_id})}"
                   if endpoints.end_session else None)
    app.add_middleware(RefusalPage, callback_path=f"/auth/oauth/{settings.oidc_name}/callback",
                       end_session=end_session)
    cl.oauth_callback(make_callback(Rules.of(settings), sessions, settings.oidc_name))
    log.info("sign-in through %s (%s) on; users come back to %s/auth/oauth/%s/callback",
             settings.oidc_name, settings.oidc_issuer, settings.public_url, settings.oidc_name)
