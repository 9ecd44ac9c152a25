"""All configuration of the stack: one pydantic-settings class, composed of groups by concept.

Every field is read from an environment variable named ``ERNIE_<FIELD>`` (for
example ``ERNIE_MAX_MODEL_LEN``) or from the ``.env`` file in the working
directory; ``.env.example`` documents each one.  The supervisor, the CLI and
the chat app all load the same class, so a value means the same thing
everywhere.  Bad values stop start-up with :class:`SettingsError`, whose text
names the variable, the value and what is allowed.

Each group (a module of this package) holds its fields, the rules that make them valid
and the ones that tie them to other groups' fields (``problems``): the model, the engine,
the KV cache, the processes of each tier, one fast stream, the chat, login, sign-in
through a provider, fair limits, who reaches the stack, and the chat's HTTPS.  ``text`` holds
the words around them (``.env.example``, error reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from server.errors import ErnieChatError
from server.settings import text
from server.settings.chat import ChatSettings
from server.settings.engine import EngineSettings
from server.settings.kv import KvSettings
from server.settings.limits import LimitSettings
from server.settings.login import LoginSettings
from server.settings.model import DEFAULT_MODEL, DEMO_MODEL, DEMO_SMALL_MODEL, ModelSettings
from server.settings.monitoring import MonitoringSettings
from server.settings.oidc import OidcSettings
from server.settings.network import NetworkSettings, api_root, app_exposed, client_url, engine_exposed, is_loopback
from server.settings.scale import ScaleSettings
from server.settings.stream import StreamSettings
from server.settings.text import ENV_PREFIX, env_name
from server.settings.tls import TlsSettings

__all__ = ["DEFAULT_MODEL", "DEMO_MODEL", "DEMO_SMALL_MODEL", "Settings", "SettingsError", "api_root", "app_exposed",
           "auth_headers", "client_url", "engine_exposed", "env_example", "env_name", "is_loopback", "load_settings"]

# In the order .env.example lists them.
GROUPS = (ModelSettings, EngineSettings, KvSettings, ScaleSettings, StreamSettings, ChatSettings,
          LoginSettings, OidcSettings, LimitSettings, NetworkSettings, TlsSettings, MonitoringSettings)


class SettingsError(ErnieChatError, ValueError):
    """Raised with a message meant for the person who set the value."""

    prefix = ""  # the message starts with its own headline, "Invalid settings ..."


# pydantic lists the fields of the last base first: the groups go in reverse.
class Settings(BaseSettings, *reversed(GROUPS)):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        protected_namespaces=(),
    )

    @model_validator(mode="after")
    def _settings_agree(self) -> "Settings":
        """Every group's rules across fields, all reported at once."""
        if problems := [problem for group in GROUPS for problem in group.problems(self)]:
            raise ValueError("; ".join(problems))
        return self

    def as_env(self) -> dict[str, str]:
        """These settings as ERNIE_* variables, so a child process sees exactly these values."""
        return {env_name(name): text.env_value(getattr(self, name))
                for name in type(self).model_fields if getattr(self, name) is not None}


# chat_db: a PostgreSQL URL carries a password.
SECRET_FIELDS = {"api_key", "users", "chat_db", "oidc_client_secret", "metrics_token"}


def auth_headers(api_key: Optional[str]) -> dict:
    """The header vLLM's --api-key / VLLM_API_KEY asks every client for."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def load_settings(**overrides) -> Settings:
    """Load and validate settings, turning pydantic's errors into a readable message."""
    if report := text.env_file_report(Path(Settings.model_config["env_file"])):
        raise SettingsError(report)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(text.describe_errors(exc, Settings.model_fields, SECRET_FIELDS)) from None


def env_example() -> str:
    """The text of .env.example: every setting with its meaning and default."""
    return text.env_example(Settings.model_fields)
