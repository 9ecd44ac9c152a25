"""The API key the command line sends to an engine: one rule for every command that talks to one.

``--api-key`` first, then ERNIE_API_KEY, then the key ``up`` generated when it exposed the engine
without one (server/stack/supervisor.py saves it below the repository, readable by its owner
only). The generated key goes only to this machine's own engines, at the settings' ports: sent
to another server it would hand that server this machine's secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server.paths import GENERATED_ENGINE_KEY, ROOT
from server.settings import api_root


@dataclass(frozen=True)
class EngineKey:
    value: Optional[str]
    source: str  # where the key came from, for the message of a refusal


def own_engine(settings, url: str) -> bool:
    """Whether ``url`` is an engine the settings start on this machine (one per model)."""
    wanted = api_root(url)
    return settings.starts_engine and any(model.base_url == wanted for model in settings.served_models)


def engine_key(settings, url: str, explicit: Optional[str] = None, root: Path = ROOT) -> EngineKey:
    """The key to send to the engine at ``url``; ``explicit``: the command's --api-key."""
    if explicit:
        return EngineKey(explicit, "--api-key")
    if settings.api_key is not None:
        return EngineKey(settings.api_key_value, "ERNIE_API_KEY")
    generated = root / GENERATED_ENGINE_KEY
    if own_engine(settings, url) and generated.exists():
        return EngineKey(generated.read_text().strip(), f"the key `up` generated, {generated}")
    return EngineKey(None, "none: neither --api-key nor ERNIE_API_KEY is set")
