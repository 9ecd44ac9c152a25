"""The settings the tests run the stack with, and apps started by the supervisor's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.paths import ROOT
from server.settings import Settings, SettingsError, load_settings
from server.stack.processes import free_port
from server.stack.supervisor import Stack


# Long enough for replies that outlast a slow /metrics poll on 2 busy cores (the demo
# model decodes ~400 tokens/s here), small enough for the fitting tests to reach.
TEST_MAX_MODEL_LEN = 4096


def engine_settings(tmp: Path, **overrides):
    values = dict(
        model="demo",
        engine_port=free_port(),
        app_port=free_port(),
        metrics_port=free_port(),  # the app's /metrics: several apps run at once
        log_file=tmp / "llm.log",
        auth_db=tmp / "auth.db",  # each app its own login counts, not the checkout's data/
        live_chats_dir=tmp / "live-chats",
        max_model_len=TEST_MAX_MODEL_LEN,
        kv_cache_gib=1,
        max_tokens=64,
        startup_timeout_s=900,
    )
    values.update(overrides)
    return load_settings(**values)


def start_app(tmp: Path, **overrides):
    """A Chainlit app started by the supervisor's code; yields its settings."""
    settings = engine_settings(tmp, **overrides)
    stack = Stack(settings, root=ROOT)
    try:
        stack.start_app()
        yield settings
    finally:
        stack.stop()


def start_balanced_app(tmp: Path, **overrides):
    """App workers (``app_workers``) behind HAProxy, which tells them each client's address
    (forwardfor); yields their settings."""
    stack = Stack(engine_settings(tmp, **overrides), root=ROOT)
    try:
        stack.plan()
        stack.start_balancer()
        stack.start_app()
        yield stack.settings
    finally:
        stack.stop()


# Replies of a known length: ignore_eos makes every reply run to max_tokens.
APP_MAX_TOKENS = 3000


def error_for(monkeypatch, name: str, value: str) -> str:
    """Set one variable and return the SettingsError message load_settings() raises."""
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    return str(info.value)


# tests/browser's short_app: replies of exactly 24 tokens (ignore_eos), with known figures.
SHORT_REPLY = 24

# Short replies: 100 of them are generated together in seconds on 2 cores, not minutes.
QA_MAX_TOKENS = 16


def settings(**values) -> Settings:
    """Settings of these values alone (no .env, no environment), for a rolling restart's plans."""
    return Settings(_env_file=None, **values)
