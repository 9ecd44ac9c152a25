"""Who reaches the stack: loopback or exposed, and what an exposed tier must have.

Any address in 127.0.0.0/8 and ``localhost`` count as loopback; the wildcards ``0.0.0.0``
and ``::`` as exposed (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

# What a browser sends as Origin: no path, no trailing slash.
ORIGIN = re.compile(r"https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")


def checked_origins(value: str) -> str:
    """The origins, comma-separated, in lower case as browsers send them."""
    found = [origin.strip().lower() for origin in value.split(",") if origin.strip()]
    for origin in found:
        if not ORIGIN.fullmatch(origin):
            # A wildcard with cookies would let any web page act as the logged-in user.
            raise ValueError(f"{origin!r} is not an origin: write each as scheme://host or "
                             "scheme://host:port, without a path or a wildcard "
                             "(e.g. https://intranet.example.com)")
    return ",".join(found)


def checked_proxies(value: str) -> str:
    """Addresses or networks, comma-separated, as HAProxy and uvicorn read them."""
    found = [item.strip() for item in value.split(",") if item.strip()]
    for item in found:
        try:
            network = ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a network: write each as an IP address "
                             "or CIDR (e.g. 10.0.0.9 or 172.18.0.0/16), comma-separated") from None
        if network.prefixlen == 0:
            # Every address: any client could then say it is anyone.
            raise ValueError(f"{item!r} trusts every address: name the proxy's own address or network")
    return ",".join(found)


def checked_public_url(value: str) -> str:
    """The chat's own origin as others reach it, in lower case; empty when unset."""
    url = value.strip().rstrip("/").lower()
    if url and not ORIGIN.fullmatch(url):
        raise ValueError(f"{value!r} is not an origin: write it as scheme://host or "
                         "scheme://host:port, without a path (e.g. https://chat.example.com)")
    return url


def is_loopback(host: str) -> bool:
    """Whether only this machine reaches ``host``; the wildcards 0.0.0.0 and :: are not."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def client_url(host: str, port: int, https: bool = False) -> str:
    """Where a client on this machine reaches a listener: never at the wildcard it binds."""
    return f"{'https' if https else 'http'}://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


def api_root(url: str) -> str:
    """An OpenAI-compatible server's root, however its URL was written: no trailing slash, no /v1."""
    return url.rstrip("/").removesuffix("/v1")


def engine_exposed(s) -> bool:
    """vLLM started here on an address other machines reach: HAProxy guards it."""
    return s.engine_url is None and s.node_role == "head" and not is_loopback(s.engine_host)


def app_exposed(s) -> bool:
    return s.node_role == "head" and not is_loopback(s.app_host)


class NetworkSettings(BaseModel):
    open_chat: bool = Field(False, description="Let an exposed chat (ERNIE_APP_HOST not loopback) run "
                            "without login (ERNIE_USERS): anyone who reaches its port can chat.")
    connections_per_client: int = Field(64, ge=0, description="Most connections at once from one "
                                        "address to an exposed chat or engine (generous: an office "
                                        "shares one address; 0: no limit).")
    allowed_origins: Annotated[str, AfterValidator(checked_origins)] = Field(
        "", description="Other web origins (scheme://host:port, comma-separated) whose pages may use "
        "the chat with the user's cookies (CORS, its socket). Empty: only the chat's own origin.")
    trusted_proxies: Annotated[str, AfterValidator(checked_proxies)] = Field(
        "", description="Reverse proxies in front of the chat (addresses or networks, comma-separated, "
        "e.g. 172.18.0.0/16 for Traefik or nginx in another container) whose X-Forwarded-For names "
        "the user's address for the per-user limits and the login throttle, and which the "
        "per-address connection limit leaves alone. Empty: only this machine's own proxies (127.0.0.1).")
    public_url: Annotated[str, AfterValidator(checked_public_url)] = Field(
        "", description="The chat's address as its users reach it (scheme://host:port, e.g. "
        "https://chat.example.com), used in shared chats' links and QR codes (empty: the address "
        "the sharing user's browser shows) and by sign-in through a provider, which sends users "
        "back to <it>/auth/oauth/<ERNIE_OIDC_NAME>/callback (required with ERNIE_OIDC_ISSUER).")

    @property
    def proxies(self) -> tuple[str, ...]:
        return tuple(item for item in self.trusted_proxies.split(",") if item)

    def problems(self) -> list[str]:
        if app_exposed(self) and not self.login_on and not self.open_chat:
            return [f"ERNIE_APP_HOST={self.app_host} lets other machines reach the chat, which has "
                    "no login: set ERNIE_USERS=name:password (comma-separated for several; "
                    "`ernie-chat hash-password` makes the hashes) or ERNIE_OIDC_ISSUER, or "
                    "ERNIE_OPEN_CHAT=true to let anyone who reaches the port chat, or "
                    "ERNIE_APP_HOST=127.0.0.1"]
        return []
