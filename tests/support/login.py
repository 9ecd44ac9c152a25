"""The login throttle's tests: a fake clock, the app's users and delays, and a timed POST /login."""

from __future__ import annotations

import time

import httpx

from app.auth.login_throttle import Policies
from server.passwords import hash_password
from server.stack.processes import free_port


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# --- the real app: POST /login ----------------------------------------------------------

BASE_S, MAX_S = 0.4, 1.6
POLICY = Policies.from_delays(BASE_S, MAX_S, 600).user
USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet", "dave": "gilmour"}
# 2^4 rounds: the same bcrypt path, but 1 ms a check, so the timings show the delays.
HASHED_USERS = ",".join(f"{name}:{hash_password(pw, rounds=4)}" for name, pw in USERS.items())


def login_app_settings(tmp, **overrides) -> dict:
    return dict(engine_url=f"http://127.0.0.1:{free_port()}", users=HASHED_USERS,
                login_delay_base_s=BASE_S, login_delay_max_s=MAX_S, **overrides)


def login(settings, user, password, source="127.0.0.1", headers=None,
          cookies=None) -> tuple[int, float, httpx.Response]:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30, headers=headers, cookies=cookies) as http:
        start = time.perf_counter()
        response = http.post(f"{settings.app_url}/login", data={"username": user, "password": password})
        return response.status_code, time.perf_counter() - start, response
