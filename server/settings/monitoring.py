"""The app's own Prometheus metrics: where they are served, and who may read them.

Metrics tell how many people chat and when, so they are served apart from the chat, on
loopback by default; an address other machines reach needs a token (docs/monitoring.md).
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field, SecretStr

from server.settings.network import is_loopback


def metrics_exposed(s) -> bool:
    return s.metrics_port != 0 and not is_loopback(s.metrics_host)


class MonitoringSettings(BaseModel):
    metrics_host: str = Field("127.0.0.1", description="Address the app's Prometheus endpoint "
                              "(/metrics, every app worker's figures added up) listens on.")
    metrics_port: int = Field(9464, ge=0, le=65535, description="Port of the app's Prometheus "
                              "endpoint, apart from the chat's; 0: no endpoint.")
    metrics_token: Optional[SecretStr] = Field(
        None, description="Bearer token Prometheus must send (Authorization: Bearer <token>) to "
        "read the app's /metrics; required when ERNIE_METRICS_HOST is not loopback.")

    def problems(self) -> list[str]:
        if metrics_exposed(self) and self.metrics_token is None:
            return [f"ERNIE_METRICS_HOST={self.metrics_host} lets other machines read the app's "
                    "metrics (who chats, when, how much): set ERNIE_METRICS_TOKEN to a long random "
                    "string that Prometheus sends as its bearer token, or ERNIE_METRICS_HOST=127.0.0.1"]
        if self.metrics_token is not None and len(self.metrics_token.get_secret_value()) < 16:
            return ["ERNIE_METRICS_TOKEN is shorter than 16 characters: use a long random one "
                    "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"]
        return []

    @property
    def metrics_token_value(self) -> Optional[str]:
        return self.metrics_token.get_secret_value() if self.metrics_token else None
