"""``qa-load --login NAME``: the chats of a stack with login (ERNIE_USERS, ERNIE_CHAT_DB).

The load logs in once with ``POST /login``, as the login page does, and every chat sends
the login's cookies, as the tabs of one browser would. The password comes from
``ERNIE_QA_PASSWORD``, never from the command line, where ``ps`` would show it. The
balancer's worker pin that came with the login's answer is dropped, so that each chat
stands for a browser of its own and is placed by the balancer as a new one would be.
Client processes (``--processes``) get the cookie from their parent in
``ERNIE_QA_LOGIN_COOKIE``: one login for the whole run, however many processes, so the
login throttle never sees a burst of attempts.
"""

from __future__ import annotations

from typing import Mapping, Optional

import httpx

from server.loadtest.lib.chat_socket import CONNECT_TIMEOUT_S, QaLoadError, check_app
from server.stack.balancer import STICKY_COOKIE

PASSWORD_ENV = "ERNIE_QA_PASSWORD"
COOKIE_ENV = "ERNIE_QA_LOGIN_COOKIE"  # from a run to its client processes


def password_from(environ: Mapping[str, str], name: str) -> str:
    password = environ.get(PASSWORD_ENV, "")
    if not password:
        raise QaLoadError(f"--login {name} needs the password in the environment: set "
                          f"{PASSWORD_ENV} (never on the command line, where ps shows it).")
    return password


def chat_cookie(cookies: Mapping[str, str]) -> str:
    """The Cookie header every chat sends: the login's cookies without the worker pin."""
    return "; ".join(f"{k}={v}" for k, v in cookies.items() if k != STICKY_COOKIE)


def refusal(status: int, name: str, url: str) -> str:
    """Why a login was refused, and what to check."""
    if status == 401:
        return (f"The app at {url} refused the login of {name!r} (401): check the name, "
                f"{PASSWORD_ENV}, and that the user is in the stack's ERNIE_USERS.")
    if status == 429:
        return (f"The app at {url} throttled the login of {name!r} (429: too many failed logins "
                "from this address or for this user): wait, then check the password.")
    return f"The login of {name!r} at {url} failed with HTTP {status}."


async def log_in(url: str, name: str, environ: Mapping[str, str]) -> str:
    """The Cookie header for every chat, after one login; a clear error if it is refused."""
    password = password_from(environ, name)
    await check_app(url, logged_in=True)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=CONNECT_TIMEOUT_S) as http:
            answer = await http.post("/login", data={"username": name, "password": password})
            cookies = dict(http.cookies.items())
    except httpx.HTTPError as exc:
        raise QaLoadError(f"The login at {url} failed: {str(exc) or type(exc).__name__}.") from None
    if answer.status_code != 200:
        raise QaLoadError(refusal(answer.status_code, name, url))
    cookie = chat_cookie(cookies)
    if not cookie:
        raise QaLoadError(f"The app at {url} accepted the login of {name!r} but set no cookie.")
    return cookie


async def chat_cookie_for(url: str, name: Optional[str], environ: Mapping[str, str],
                          from_parent: bool = False) -> str:
    """The cookie a run's chats send: "" without --login; a client process (``from_parent``)
    takes its parent's rather than logging in again."""
    if from_parent:
        return environ.get(COOKIE_ENV, "")
    return await log_in(url, name, environ) if name else ""


def client_environment(cookie: str, environ: Mapping[str, str]) -> Optional[dict[str, str]]:
    """A client process's environment: the run's login cookie instead of the password
    (None: the parent's as it is, when there is no login)."""
    if not cookie:
        return None
    return {**{k: v for k, v in environ.items() if k != PASSWORD_ENV}, COOKIE_ENV: cookie}
