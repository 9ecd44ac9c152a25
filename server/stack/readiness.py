"""Waiting for a child until it really serves, and asking it whether it still does."""

from __future__ import annotations

import time
from typing import Callable, Optional

import httpx

from server import tls_contexts
from server.progress import StatusLine
from server.settings import auth_headers


def probe_engine(base_url: str, api_key: Optional[str], timeout_s: float = 2.0) -> Optional[dict]:
    """The first entry of /v1/models once the engine is healthy and serving, else None.

    /health turns 200 a moment before the model is listed, so both are asked.
    """
    try:
        with httpx.Client(timeout=timeout_s, verify=tls_contexts.shared()) as client:
            if client.get(f"{base_url}/health").status_code != 200:
                return None
            models = client.get(f"{base_url}/v1/models", headers=auth_headers(api_key))
            if models.status_code != 200:
                return None
            data = models.json().get("data") or []
            return data[0] if data else None
    except (httpx.HTTPError, ValueError):
        return None


def http_ok(url: str, timeout_s: float = 2.0, verify: bool = True) -> bool:
    """``verify=False`` for our own HAProxy on loopback, whose certificate names the
    machine's public names, not 127.0.0.1: the probe sends nothing secret."""
    try:
        return httpx.get(url, timeout=timeout_s, verify=tls_contexts.shared(verify)).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(check: Callable[[], object], is_dead: Callable[[], bool], timeout_s: float,
               status: StatusLine, detail: Callable[[], str], interval_s: float = 0.2) -> object:
    """Poll ``check`` until it returns something truthy, the process dies, or time runs out.

    Every child's start-up waits here, one after another, so each poll interval is paid at
    most once per child: at 1 s they added 1-2 s to a start on the H200 (`up`'s "until it
    answered" and HAProxy's 1.1 s for a start of ~50 ms); a refused connection costs
    microseconds, so polling 5 times a second is free as long as each poll's client does not
    build a TLS context of its own (server/tls_contexts.py)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        if is_dead():
            return None
        status.update(detail())
        time.sleep(interval_s)
    return None
