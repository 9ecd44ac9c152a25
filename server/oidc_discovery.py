"""The endpoints of an OpenID Connect provider, from its discovery document.

Read once at start (``app/auth/oidc.py``) and by ``up``'s checks before anything starts, so a
wrong or unreachable ERNIE_OIDC_ISSUER stops start-up with a message, not a chat whose
sign-in button fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import httpx

from server.errors import ErnieChatError

DISCOVERY_PATH = "/.well-known/openid-configuration"
TIMEOUT_S = 10.0


class OidcError(ErnieChatError):
    """The OpenID Connect provider cannot be used as configured."""


@dataclass(frozen=True)
class Endpoints:
    issuer: str  # exactly as the document (and so the ID tokens) spell it
    authorize: str
    token: str
    userinfo: str
    end_session: Optional[str] = None


def endpoints_from(document: object, issuer: str) -> Endpoints:
    """The endpoints a discovery document names, once it is the issuer's own."""
    where = f"{issuer}{DISCOVERY_PATH}"
    if not isinstance(document, dict):
        raise OidcError(f"{where} is not an OpenID Connect discovery document (not a JSON object)")
    # OpenID Connect Discovery 4.3: the document must name exactly the issuer asked for (the
    # setting is kept without a trailing slash; Authentik's issuers end in one).
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise OidcError(f"{where} names the issuer {document.get('issuer')!r}, not {issuer!r}: "
                        "set ERNIE_OIDC_ISSUER to the provider's issuer exactly (for Keycloak "
                        "https://HOST/realms/REALM)")
    missing = [key for key in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint")
               if not isinstance(document.get(key), str) or not document[key]]
    if missing:
        raise OidcError(f"{where} lacks {', '.join(missing)}: the chat needs a provider with the "
                        "authorization-code flow and a userinfo endpoint")
    return Endpoints(document["issuer"], document["authorization_endpoint"], document["token_endpoint"],
                     document["userinfo_endpoint"], document.get("end_session_endpoint"))


def discover(issuer: str) -> Endpoints:
    """Read the issuer's discovery document; a clear OidcError when it cannot be had."""
    where = f"{issuer}{DISCOVERY_PATH}"
    try:
        response = httpx.get(where, timeout=TIMEOUT_S, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise OidcError(f"cannot reach the OpenID Connect provider at {where} ({exc}): check "
                        "ERNIE_OIDC_ISSUER and that this machine reaches it") from None
    if response.status_code != 200:
        raise OidcError(f"{where} answered HTTP {response.status_code}: ERNIE_OIDC_ISSUER is "
                        "probably not the issuer's URL (for Keycloak https://HOST/realms/REALM)")
    try:
        document = response.json()
    except ValueError:
        raise OidcError(f"{where} did not answer JSON: ERNIE_OIDC_ISSUER is probably not an "
                        "OpenID Connect issuer") from None
    return endpoints_from(document, issuer)
