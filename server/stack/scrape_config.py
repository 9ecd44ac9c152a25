"""Prometheus's scrape configuration for this stack, from the repository's template.

``server/stack/monitoring/prometheus.yml`` is the one template; this fills in where the app's
and every model's vLLM's /metrics listen and how Prometheus proves who it is. Secrets never go into the
text: an endpoint that asks for a bearer token gets a ``credentials_file`` to read it from.
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template
from typing import Optional
from urllib.parse import urlsplit

from server.paths import GENERATED_ENGINE_KEY, ROOT
from server.settings import Settings, client_url

TEMPLATE = ROOT / "server" / "stack" / "monitoring" / "prometheus.yml"
# Where a token set in the environment (not generated into .cache) should be written for Prometheus.
APP_TOKEN_FILE = Path("/etc/prometheus/ernie-chat-metrics-token")
ENGINE_KEY_FILE = Path("/etc/prometheus/ernie-chat-engine-key")


def auth_block(credentials_file: Optional[Path]) -> str:
    if credentials_file is None:
        return ""
    return ("    authorization:\n      type: Bearer\n"
            f"      credentials_file: {credentials_file}\n")


def host_port(url: str) -> str:
    return urlsplit(url).netloc


def engine_targets(settings: Settings) -> str:
    """Every model's engine (ERNIE_MODELS, or ERNIE_MODEL alone), each a target labelled
    ``model`` with its served name, so that a query can tell the models apart."""
    return "\n".join(f'      - targets: ["{host_port(model.base_url)}"]\n'
                     f'        labels:\n          model: {json.dumps(model.served_name)}'
                     for model in settings.served_models)


def engine_key_file(settings: Settings, root: Path = ROOT) -> Optional[Path]:
    """The file holding the engine's key: ``up`` saves a generated one in .cache; one set in
    ERNIE_API_KEY must be copied to ENGINE_KEY_FILE by whoever runs Prometheus."""
    generated = root / GENERATED_ENGINE_KEY
    if settings.api_key is not None:
        return ENGINE_KEY_FILE
    return generated if generated.exists() else None


def render(settings: Settings, interval_s: int = 15, engine_key: Optional[Path] = None,
           app_token: Optional[Path] = None) -> str:
    """The scrape configuration; ``engine_key`` and ``app_token`` name the files holding the
    bearer tokens (None: that endpoint needs none)."""
    return Template(TEMPLATE.read_text()).substitute(
        interval=f"{interval_s}s",
        app_target=host_port(client_url(settings.metrics_host, settings.metrics_port)),
        app_auth=auth_block(app_token),
        engine_targets=engine_targets(settings),
        engine_auth=auth_block(engine_key))


def render_for(settings: Settings, root: Path = ROOT) -> str:
    """As ``ernie-chat scrape-config`` prints it for this machine's settings."""
    return render(settings, engine_key=engine_key_file(settings, root),
                  app_token=APP_TOKEN_FILE if settings.metrics_token is not None else None)
