"""The admin page: ``/admin`` (HTML) and ``/admin.json`` (the same figures, for scripts).

Only admins reach it (``auth_sessions.is_admin``: the login put ``role: admin`` in the
user's metadata).  The user is read as every Chainlit route reads it, through the
session checks of ``app/auth/auth_sessions.py``, so a revoked or stale login is anonymous
here.  Anonymous gets 401 with a link to the login, a non-admin 403, and with login off
there is no page (404), each with a sentence why.  An admin's view is an audit record, and the
page shows the newest records (server/chat_records.py).

The page is plain server-rendered HTML with no script, under the chat's
Content-Security-Policy (``app/web/page_policy.py``); every value in it is escaped: user
names and chat titles (the first message of a chat) are anyone's text.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
from dataclasses import dataclass
from typing import Optional, Union

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from app import chat_records
from app.auth.auth_sessions import is_admin
from app.pages.admin_figures import (MAX_DAYS, BadDays, Day, Report, UNKNOWN_USER, day_range, parse_days,
                                     read_usage_sums, report, stored)
from app.texts import lang_of, text
from server.chat_records import ADMIN_VIEW, AUDIT_SHOWN
from server.settings import Settings

PAGE, JSON = "/admin", "/admin.json"
LOGIN = "/login"
NO_STORE = {"cache-control": "no-store"}
STYLE = """
body { font-family: "Noto Sans", "Noto Sans CJK SC", "Helvetica Neue", Arial, sans-serif;
       margin: 1.5rem; color: #111; background: #fff; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
thead th { background: #f0f0f0; }
tfoot td { font-weight: bold; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 0.2rem; }
.note { background: #fff4c2; padding: 0.4rem 0.8rem; }
.muted { color: #666; }
"""
COLUMNS = ("chats", "messages", "replies", "prompt_tokens", "reply_tokens", "errors")


@dataclass
class Refusal:
    status: int
    key: str
    values: dict


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def row(cells: list[str], tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def user_name(lang: str, name: str) -> str:
    return esc(name) if name != UNKNOWN_USER else esc(text(lang, "admin_unknown_user"))


def errors_cell(errors: dict[str, int]) -> str:
    return esc(", ".join(f"{kind} {n}" for kind, n in errors.items()))


def overview(lang: str, days: list[Day]) -> str:
    heads = ["admin_day", "admin_users", *(f"admin_{c}" for c in COLUMNS[:-1]), "admin_errors_by_kind"]
    body = [row([esc(d.day), esc(len(d.users)), *(esc(d.total(c)) for c in COLUMNS[:-1]),
                 errors_cell(d.errors)]) for d in days]
    return ("<table><thead>" + row([esc(text(lang, h)) for h in heads], "th") + "</thead><tbody>"
            + "".join(body) + "</tbody></table>")


def day_table(lang: str, day: Day) -> str:
    """One day's users: only for a day with any (the overview lists every day)."""
    heading = f'<h2 id="day-{esc(day.day)}">{esc(day.day)}</h2>'
    heads = ["admin_user", *(f"admin_{c}" for c in COLUMNS)]
    body = [row([user_name(lang, u.user), *(esc(getattr(u, c)) for c in COLUMNS)]) for u in day.users]
    total = row([esc(f'{text(lang, "admin_users")}: {len(day.users)}'),
                 *(esc(day.total(c)) for c in COLUMNS)])
    kinds = (f'<p>{esc(text(lang, "admin_errors_by_kind"))}: {errors_cell(day.errors)}</p>'
             if day.errors else "")
    return (heading + "<table><thead>" + row([esc(text(lang, h)) for h in heads], "th")
            + "</thead><tbody>" + "".join(body) + "</tbody><tfoot>" + total + "</tfoot></table>" + kinds)


def busiest_table(lang: str, figures: Report) -> str:
    if not figures.busiest:
        return ""
    heads = ["admin_title_column", "admin_user", "admin_messages", "admin_last"]
    body = [f'<tr><td class="text">{esc(c.title)}</td><td>{user_name(lang, c.user)}</td>'
            f"<td>{esc(c.messages)}</td><td>{esc(c.last_at[:19].replace('T', ' '))}</td></tr>"
            for c in figures.busiest]
    return (f'<h2>{esc(text(lang, "admin_busiest"))}</h2><table><thead>'
            + row([esc(text(lang, h)) for h in heads], "th") + "</thead><tbody>" + "".join(body)
            + "</tbody></table>")


def audit_table(lang: str, figures: Report) -> str:
    """The newest audit records, newest first; with saved chats only (they are kept there)."""
    if not figures.saved_chats:
        return ""
    heads = ["admin_audit_at", "admin_audit_action", "admin_user", "admin_audit_address", "admin_audit_detail"]
    body = [f'<tr><td>{esc(a.at[:19].replace("T", " "))}</td><td class="text">{esc(a.action)}</td>'
            f'<td class="text">{esc(a.name)}</td><td class="text">{esc(a.address)}</td>'
            f'<td class="text">{esc(a.detail)}</td></tr>' for a in figures.audit]
    return (f'<h2 id="audit">{esc(text(lang, "admin_audit", n=AUDIT_SHOWN))}</h2><table><thead>'
            + row([esc(text(lang, h)) for h in heads], "th") + "</thead><tbody>" + "".join(body)
            + "</tbody></table>")


def document(lang: str, body: str) -> str:
    return (f'<!doctype html><html lang="{"zh-CN" if lang == "zh" else "en"}"><head>'
            '<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{esc(text(lang, "admin_title"))}</title><style>{STYLE}</style></head>'
            f"<body>{body}</body></html>")


def page_html(lang: str, figures: Report, days: int) -> str:
    json_link = f'<a href="{esc(f"{JSON}?days={days}")}">{esc(JSON)}</a>'
    period = esc(text(lang, "admin_period", days=days, first=figures.days[-1].day,
                      last=figures.days[0].day, max=MAX_DAYS, json="\0")).replace("\0", json_link)
    note = "" if figures.saved_chats else f'<p class="note">{esc(text(lang, "admin_no_chat_db"))}</p>'
    if not any(d.users for d in figures.days):
        note += f'<p class="muted">{esc(text(lang, "admin_nothing"))}</p>'
    return document(lang, f'<h1>{esc(text(lang, "admin_title"))}</h1><p>{period}</p>{note}'
                    + overview(lang, figures.days) + busiest_table(lang, figures)
                    + "".join(day_table(lang, d) for d in figures.days if d.users)
                    + audit_table(lang, figures))


def refusal_html(lang: str, refusal: Refusal) -> str:
    link = (f'<p><a href="{LOGIN}">{esc(text(lang, "admin_login_link"))}</a></p>'
            if refusal.status == 401 else "")
    return document(lang, f'<h1>{esc(text(lang, "admin_title"))}</h1>'
                    f'<p>{esc(text(lang, refusal.key, **refusal.values))}</p>{link}')


async def current_user(request: Request):
    """The logged-in user, or None: Chainlit's own check with the session checks in place
    (``app.dependency_overrides``, app/auth/auth_sessions.py)."""
    from chainlit.auth import get_current_user, reuseable_oauth
    from chainlit.server import app
    token = await reuseable_oauth(request)
    if not token:
        return None
    resolve = app.dependency_overrides.get(get_current_user, get_current_user)
    try:
        return await resolve(token)
    except HTTPException:
        return None


async def figures(settings: Settings, days: int) -> Report:
    period = day_range(dt.datetime.now(dt.timezone.utc).date(), days)
    since = period[-1]
    if settings.chat_db is None:
        usage = await asyncio.to_thread(read_usage_sums, settings.usage_log, since)
        return report(period, [], [], usage, False)
    from chainlit.data import get_data_layer
    found = await stored(get_data_layer().engine, since)
    return report(period, found.messages, found.busiest, found.usage, True, found.audit)


async def answer(settings: Settings, request: Request) -> Union[Refusal, tuple[Report, int]]:
    if not settings.login_on:
        return Refusal(404, "admin_no_login", {})
    user = await current_user(request)
    if user is None:
        return Refusal(401, "admin_login_first", {})
    if not is_admin(user):
        return Refusal(403, "admin_not_admin", {"user": user.identifier})
    chat_records.audit(ADMIN_VIEW, user.identifier, chat_records.address(request.scope), request.url.path)
    raw: Optional[str] = request.query_params.get("days")
    try:
        days = parse_days(raw)
    except BadDays:
        return Refusal(400, "admin_bad_days", {"max": MAX_DAYS, "value": repr(raw)[:40]})
    return await figures(settings, days), days


def install(settings: Settings) -> None:
    """Add the admin routes; call before ``live_page.install``, which moves Chainlit's
    catch-all GET route behind every route added until then."""
    from chainlit.server import app

    @app.get(PAGE, include_in_schema=False)
    async def admin_page(request: Request) -> HTMLResponse:
        lang = lang_of(request.headers.get("accept-language"))
        outcome = await answer(settings, request)
        if isinstance(outcome, Refusal):
            return HTMLResponse(refusal_html(lang, outcome), outcome.status, headers=NO_STORE)
        return HTMLResponse(page_html(lang, *outcome), headers=NO_STORE)

    @app.get(JSON, include_in_schema=False)
    async def admin_json(request: Request) -> JSONResponse:
        outcome = await answer(settings, request)
        if isinstance(outcome, Refusal):
            lang = lang_of(request.headers.get("accept-language"))
            return JSONResponse({"detail": text(lang, outcome.key, **outcome.values)},
                                outcome.status, headers=NO_STORE)
        found, days = outcome
        return JSONResponse({"period_days": days, **found.as_json()}, headers=NO_STORE)
