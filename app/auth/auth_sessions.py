"""Login sessions that can be ended: logout, removed users, changed passwords, sign-out.

Works around Chainlit 2.12, whose login token (a JWT, ``chainlit/auth/jwt.py``) is
valid until it expires, whatever happens meanwhile: ``/logout`` only drops the
browser's cookie (a copy of the token keeps working), and a user removed from
ERNIE_USERS or given a new password keeps the access
they had.  Drop this module when Chainlit can revoke tokens itself.

What it adds, with the state in the shared store (``server/auth_store.py``), so that
every worker agrees and a restart forgets nothing:

- a logout revokes its token (its hash is kept until the token would expire);
- every authenticated request and websocket connect checks that the token is not
  revoked, was issued after its user was last signed out everywhere (``ernie-chat
  revoke-sessions NAME``), that its user is still in ERNIE_USERS, and that their
  password has not changed since: a password login's token carries a keyed
  fingerprint of the stored secret (``fingerprint``), compared with the current one;
  and that a password login's admin role (``ROLE_KEY``) still matches ERNIE_ADMINS;
- its lifetime is ERNIE_SESSION_LIFETIME_S.

Chainlit's ``/auth/jwt``, which renews any valid token, is closed (``app/web/closed_routes.py``).

How: FastAPI's ``dependency_overrides`` replaces ``chainlit.auth.get_current_user``
for every route that asks for the user (``UserParam``, and ``app/pages/live_page.py``);
``chainlit.socket`` imported the function by name, so its binding is replaced too.
A websocket already open when its token is revoked stays open until it reconnects.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from typing import Optional

import chainlit as cl
import jwt as pyjwt
from chainlit.auth import get_current_user, reuseable_oauth
from chainlit.auth.cookie import get_token_from_cookies
from chainlit.auth.jwt import get_jwt_secret
from fastapi import Depends, HTTPException, Request, Response
from fastapi.security.utils import get_authorization_scheme_param

from app import chat_records
from server.auth_store import AuthStore, open_store
from server.chat_records import SIGN_OUT
from server.settings import Settings

log = logging.getLogger(__name__)

PROVIDER = "password"  # the metadata of a password login's token
OIDC_PROVIDER = "oidc"  # the metadata of a sign-in through a provider (app/auth/oidc.py)
# A user's metadata["role"]: set by the login (ERNIE_ADMINS, or a sign-in provider's group)
# and read by is_admin only.
ROLE_KEY, ADMIN = "role", "admin"
_PURPOSE = b"ernie-chat password fingerprint"


def fingerprint(auth_secret: str, stored_secret: str) -> str:
    """A keyed digest of a user's stored secret (hash): changes when the password does, and
    tells nothing about it to whoever reads a token."""
    key = hmac.new(auth_secret.encode(), _PURPOSE, hashlib.sha256).digest()
    return hmac.new(key, stored_secret.encode(), hashlib.sha256).hexdigest()[:32]


def is_admin(user) -> bool:
    """May this user (Chainlit's User or PersistedUser, or None) open the admin page?"""
    return user is not None and (getattr(user, "metadata", None) or {}).get(ROLE_KEY) == ADMIN


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def login_metadata(provider: str, admin: bool, **extra) -> dict:
    """A token's metadata.  The random ``login`` makes each login's token unique: two logins
    of one user in one second would otherwise get the same token, and a logout of the one
    would revoke the other."""
    metadata = {"provider": provider, **extra, "login": secrets.token_hex(8)}
    if admin:
        metadata[ROLE_KEY] = ADMIN
    return metadata


class Sessions:
    """The checks, over the store, ERNIE_USERS and the secret that signs the tokens."""

    def __init__(self, store: AuthStore, users: dict[str, str], auth_secret: str,
                 oidc_recheck_s: Optional[float] = None, admins: frozenset[str] = frozenset()):
        self.store, self.users, self.auth_secret, self.admins = store, users, auth_secret, admins
        self.oidc_recheck_s = oidc_recheck_s  # None: sign-in through a provider is off

    def user_metadata(self, name: str) -> dict:
        """What a password login puts in its token."""
        return login_metadata(PROVIDER, name in self.admins,
                              key=fingerprint(self.auth_secret, self.users[name]))

    @staticmethod
    def oidc_metadata(admin: bool) -> dict:
        """What a sign-in through the provider puts in its token: ``signed_in``, from which
        the provider is asked again in time."""
        return login_metadata(OIDC_PROVIDER, admin, signed_in=int(time.time()))

    def claims(self, token: Optional[str]) -> Optional[dict]:
        """The token's claims when Chainlit's own checks (signature, expiry) pass, else None."""
        try:
            return pyjwt.decode(token or "", self.auth_secret, algorithms=["HS256"])
        except pyjwt.InvalidTokenError:
            return None

    async def refusal(self, token: str, claims: dict) -> Optional[str]:
        """Why this valid token may no longer be used (for the log), or None."""
        name = claims.get("identifier", "")
        revoked, signed_out_at = await self.store.session_marks(token_digest(token), name)
        if revoked:
            return "logged out"
        # iat is whole seconds, rounded down: a token of the same second is refused.
        if signed_out_at is not None and claims.get("iat", 0) <= signed_out_at:
            return "signed out everywhere"
        metadata = claims.get("metadata") or {}
        if metadata.get("provider") == PROVIDER:
            stored = self.users.get(name)
            if stored is None:
                return "no longer in ERNIE_USERS"
            if not hmac.compare_digest(str(metadata.get("key", "")), fingerprint(self.auth_secret, stored)):
                return "password changed"
            if (metadata.get(ROLE_KEY) == ADMIN) != (name in self.admins):
                return "admin role changed in ERNIE_ADMINS"
        if metadata.get("provider") == OIDC_PROVIDER:
            return self._oidc_refusal(name, metadata)
        return None

    def _oidc_refusal(self, name: str, metadata: dict) -> Optional[str]:
        if self.oidc_recheck_s is None:
            return "sign-in through the provider is off"
        if name in self.users:
            return "the name is now a password user's"
        if time.time() - float(metadata.get("signed_in", 0)) > self.oidc_recheck_s:
            return "the provider's sign-in is due again (ERNIE_OIDC_RECHECK_S)"
        return None

    async def usable(self, token: Optional[str]) -> bool:
        """False for a valid token that was revoked or went stale; True otherwise (an
        invalid token is Chainlit's to refuse)."""
        claims = self.claims(token)
        if claims is None:
            return True
        if reason := await self.refusal(token, claims):
            log.warning("refused the session of %r: %s", str(claims.get("identifier"))[:64], reason)
            return False
        return True

    async def revoke(self, token: Optional[str]) -> None:
        if (claims := self.claims(token)) is not None:
            await self.store.revoke_token(token_digest(token), float(claims["exp"]), time.time())


def _bearer(headers) -> Optional[str]:
    scheme, token = get_authorization_scheme_param(headers.get("authorization"))
    return token if scheme.lower() == "bearer" else None


def start(settings: Settings) -> Sessions:
    """The checks over the shared store, installed; call at import time of the Chainlit app,
    with passwords, a provider or both turned on."""
    # Unset, Chainlit refuses to start right after this import (ensure_jwt_secret).
    sessions = Sessions(open_store(settings.chat_db, settings.auth_db), settings.user_passwords,
                        get_jwt_secret() or "",
                        settings.oidc_recheck_s if settings.oidc_issuer is not None else None,
                        settings.admin_names)
    install(sessions, settings.session_lifetime_s)
    return sessions


def install(sessions: Sessions, lifetime_s: float) -> None:
    """Check every token's session; call at import time of the Chainlit app, with login on."""
    import chainlit.socket
    from chainlit.config import config
    from chainlit.server import app

    config.project.user_session_timeout = int(lifetime_s)  # read by create_jwt and the cookie

    async def checked_user(token: str = Depends(reuseable_oauth)):
        user = await get_current_user(token)
        if user is not None and not await sessions.usable(token):
            raise HTTPException(status_code=401, detail="Invalid authentication token")
        return user

    async def socket_user(token: str):
        user = await get_current_user(token=token)
        return user if user is not None and await sessions.usable(token) else None

    app.dependency_overrides[get_current_user] = checked_user
    chainlit.socket.get_current_user = socket_user

    @cl.on_logout
    async def revoke_on_logout(request: Request, response: Response) -> dict:
        token = get_token_from_cookies(request.cookies) or _bearer(request.headers)
        if (claims := sessions.claims(token)) is not None:
            chat_records.audit(SIGN_OUT, str(claims.get("identifier", "")), chat_records.address(request.scope))
        await sessions.revoke(token)
        return {"success": True}
