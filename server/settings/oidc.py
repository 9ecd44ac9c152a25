"""Sign-in through an OpenID Connect provider (Keycloak, Authentik, Entra ID, Google ...)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Optional
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, Field, SecretStr

# The name is a path segment (/auth/oauth/<name>) and the sign-in button's label.
PROVIDER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,39}")
HTTP_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")


def loopback(host: Optional[str]) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_issuer(value: Optional[str]) -> Optional[str]:
    """An https URL, or http for a provider on this machine only: over plain http the
    provider's discovery document, keys and answers about who signed in could be altered on
    the way."""
    if value is None or not value.strip():
        return None
    value = value.strip().rstrip("/")
    if not HTTP_URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an http(s) URL without query or fragment "
                         "(e.g. https://sso.example.com/realms/staff)")
    parts = urlsplit(value)
    if parts.scheme != "https" and not loopback(parts.hostname):
        raise ValueError(f"{value!r} is plain http: anyone on the way could answer for the provider "
                         "and sign in as anyone. Use the provider's https:// URL (http is taken only "
                         "for a provider on this machine: localhost, 127.0.0.1, ::1)")
    return value


def checked_name(value: str) -> str:
    if not PROVIDER_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a usable name: a letter, then up to 39 letters, digits, "
                         "'_', '.' or '-' (e.g. Keycloak)")
    return value


def comma_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


class OidcSettings(BaseModel):
    oidc_issuer: Annotated[Optional[str], AfterValidator(checked_issuer)] = Field(
        None, description="OpenID Connect issuer URL; set, the login page offers sign-in through "
        "this provider (its endpoints come from <issuer>/.well-known/openid-configuration at start). "
        "Works alongside ERNIE_USERS.")
    oidc_client_id: Optional[str] = Field(None, description="The client (application) id registered "
                                          "for the chat at the provider.")
    oidc_client_secret: Optional[SecretStr] = Field(None, description="That client's secret.")
    oidc_name: Annotated[str, AfterValidator(checked_name)] = Field(
        "SSO", description="The provider's name on the login page's button (\"Continue with "
        "<name>\") and in the callback URL <public URL>/auth/oauth/<name>/callback.")
    oidc_scopes: str = Field("openid email profile", description="Scopes asked of the provider "
                             "(space-separated); some providers need one more for the groups claim.")
    oidc_user_claim: str = Field("email", description="The claim that names a user in the chat (their "
                                 "saved chats are theirs under this name): email, preferred_username, "
                                 "sub ...")
    oidc_groups_claim: str = Field("groups", description="The claim that lists a user's groups "
                                   "(from the userinfo answer or the ID token).")
    oidc_allowed_domains: str = Field("", description="E-mail domains whose users may sign in "
                                      "(comma-separated, e.g. example.com); empty: any.")
    oidc_allowed_groups: str = Field("", description="Groups whose members may sign in "
                                     "(comma-separated); empty: any. With domains too, a user "
                                     "needs both.")
    oidc_admin_group: Optional[str] = Field(None, description="Members of this group sign in as "
                                            "admins (role admin in their user metadata).")
    oidc_recheck_s: int = Field(12 * 3600, ge=60, description="A provider sign-in is asked again "
                                "after this long (the browser goes back through the provider, "
                                "silently if its session there lasts), so a user removed there "
                                "loses access by then.")

    @property
    def oidc_domains(self) -> tuple[str, ...]:
        return tuple(d.lower().lstrip("@") for d in comma_list(self.oidc_allowed_domains))

    @property
    def oidc_groups(self) -> tuple[str, ...]:
        return comma_list(self.oidc_allowed_groups)

    def problems(self) -> list[str]:
        if self.oidc_issuer is None:
            return []
        missing = [name for name, value in (("ERNIE_OIDC_CLIENT_ID", self.oidc_client_id),
                                            ("ERNIE_OIDC_CLIENT_SECRET", self.oidc_client_secret),
                                            ("ERNIE_PUBLIC_URL", self.public_url)) if not value]
        if missing:
            return [f"ERNIE_OIDC_ISSUER turns on sign-in through a provider, which also needs "
                    f"{', '.join(missing)}"]
        if "openid" not in self.oidc_scopes.split():
            return ["ERNIE_OIDC_SCOPES must include openid (it is what makes the sign-in OpenID Connect)"]
        return []
