"""What every chat of this app worker shares, made once when the worker starts: the settings,
the HTTP client to the engines, one client per served model, and the users' limits."""

from __future__ import annotations

import logging

import httpx

from app.auth.user_limits import Limits, RepliesAtOnce, UserLimits
from app.engine import engine_client as ec
from app.engine import model_choice, server_info
from app.engine.busy import BusyGauge
from server.auth_store import open_store
from server.settings import auth_headers, load_settings

SETTINGS = load_settings()
# httpx logs one INFO line per request (every reply, every count): a log line per message
# at a crowd's rates that says nothing the engine's log does not.
for _client_log in ("httpx", "httpx2"):
    logging.getLogger(_client_log).setLevel(logging.WARNING)
# The key on every request, not only /v1: an exposed engine's HAProxy asks for it on
# /tokenize and /metrics too (server/stack/balancer.py).
HTTP = httpx.AsyncClient(timeout=httpx.Timeout(SETTINGS.request_timeout_s, connect=5.0),
                         limits=httpx.Limits(max_connections=None, keepalive_expiry=SETTINGS.app_keepalive_s),
                         headers=auth_headers(SETTINGS.api_key_value))
# One client per served model for every chat: building one costs ~25 ms of CPU, which stalls
# the event loop when many chats open at once (found by `ernie-chat qa-load`).
ENGINES = model_choice.Engines(SETTINGS, ec.make_client, lambda view: (
    BusyGauge(view.busy_queue, lambda: server_info.read_metrics(HTTP, view.engine_base_url))
    if view.busy_queue is not None else None))
_LIMITS = Limits.from_settings(SETTINGS.user_messages_per_min, SETTINGS.user_tokens_per_day)
# Counted in the store every worker shares (app/auth/user_limits.py); None when no limit is set.
LIMITS = UserLimits(open_store(SETTINGS.chat_db, SETTINGS.auth_db), _LIMITS) if _LIMITS.on else None
# Each user's replies running at once in this worker (ERNIE_REPLIES_PER_USER).
REPLIES = RepliesAtOnce(SETTINGS.replies_per_user)
