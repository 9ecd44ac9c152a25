"""HTTPS for the chat: the team's certificate, or one made here when the chat is exposed.

Whether the chat speaks TLS follows from the other settings (``chat_tls``): a given
certificate always turns it on; without one, an exposed chat (ERNIE_APP_HOST not
loopback) gets a certificate of a local CA made at the first start
(server/stack/tls.py), and a loopback-only chat stays plain HTTP, since nothing of it
crosses a network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field

from server.settings.network import app_exposed


class TlsSettings(BaseModel):
    tls: Literal["auto", "off"] = Field(
        "auto", description="HTTPS for the chat. auto: with ERNIE_TLS_CERT when it is set, else "
        "with a certificate of a local CA made at the first start when the chat is exposed "
        "(ERNIE_APP_HOST not loopback); a loopback-only chat stays plain HTTP. off: plain HTTP "
        "even when exposed (only behind a TLS proxy of your own).")
    tls_cert: Optional[Path] = Field(
        None, description="PEM file of the chat's certificate, its chain after it (as HAProxy's "
        "`crt` reads it); may hold the private key too. Turns HTTPS on, on loopback too.")
    tls_key: Optional[Path] = Field(
        None, description="PEM file of the certificate's private key (unencrypted); unset: the "
        "key is in ERNIE_TLS_CERT.")

    def problems(self) -> list[str]:
        if self.tls_key is not None and self.tls_cert is None:
            return ["ERNIE_TLS_KEY is set without ERNIE_TLS_CERT: set the certificate's PEM file too"]
        if self.tls == "off" and self.tls_cert is not None:
            return ["ERNIE_TLS=off and ERNIE_TLS_CERT contradict each other: unset the one you "
                    "do not mean"]
        return []

    @property
    def chat_tls(self) -> bool:
        """Whether the chat's port speaks HTTPS (through HAProxy)."""
        if self.tls == "off" or self.node_role != "head":
            return False
        return self.tls_cert is not None or app_exposed(self)
