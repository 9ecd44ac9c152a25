"""The chat's commands, typed as a message: ``/status`` (the engine's KV use and queue),
``/export`` (the chat as Markdown and JSON), ``/share`` and ``/unshare`` (a read-only link),
``/compare <question>`` (every served model at once, side by side).  None of them enters the
model's history.  Each counts as a message for its user's limits, admitted before it runs
(app/chat.py): ``/compare`` as a reply per model (:func:`ask_of`), the others as a message only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, Optional

import chainlit as cl
from chainlit.data import get_data_layer

from app import chat_records
from app.conversation import compare, export
from app.conversation.admission import COMMAND, Ask, reply_ask, spend_tokens
from app.conversation.prompt_budget import SLACK_PER_MESSAGE, text_bound
from app.conversation.notices import lang, login_name, notice, say_error, show_error
from app.engine import server_info
from app.pages import live_page, share_links, share_qr
from app.texts import text
from app.worker import ENGINES, HTTP, SETTINGS
from server.chat_records import SHARE, UNSHARE

STATUS_COMMAND = "/status"
EXPORT_COMMAND = "/export"
COMPARE_COMMAND = "/compare"
SHARE_COMMAND, UNSHARE_COMMAND = "/share", "/unshare"


@dataclass(frozen=True)
class Command:
    name: str
    question: str = ""  # /compare's


def command_of(content: str) -> Optional[Command]:
    """The command ``content`` is; None when it is none, for the model to answer."""
    typed = content.strip()
    if typed in (STATUS_COMMAND, EXPORT_COMMAND, SHARE_COMMAND, UNSHARE_COMMAND):
        return Command(typed)
    if (question := compare.question_of(content, COMPARE_COMMAND)) is not None:
        return Command(COMPARE_COMMAND, question)
    return None


def ask_of(command: Command) -> Ask:
    """What admitting ``command`` takes: ``/compare`` a reply per served model, with their tokens
    reserved (unless it is refused for what it asks); any other a message's count only."""
    if command.name != COMPARE_COMMAND or _compare_refusal(command.question):
        return COMMAND
    system = cl.user_session.get("params").system_prompt
    prompt = text_bound([{"content": system}, {"content": command.question}], SLACK_PER_MESSAGE)
    return reply_ask(prompt, replies=len(ENGINES.all))


async def run(command: Command, with_files: Callable[[str], Awaitable[Optional[str]]]) -> None:
    """Carry out ``command``, once admitted.  ``with_files``: a text with the message's attached
    files' text (None when one is refused)."""
    if command.name == STATUS_COMMAND:
        await show_status()
    elif command.name == EXPORT_COMMAND:
        await send_export()
    elif command.name in (SHARE_COMMAND, UNSHARE_COMMAND):
        await share_chat(command.name == SHARE_COMMAND)
    else:
        await compare_models(command.question, with_files)


async def show_status() -> None:
    url = ENGINES.current().url
    try:
        metrics = await server_info.read_metrics(HTTP, url)
    except Exception as exc:
        await say_error(exc)
        return
    if metrics is None:
        await notice(text(lang(), "no_metrics", url=url), "status")
        return
    await notice(f"**{url}** — {metrics.summary()}", "status")


async def compare_models(question: str, with_files: Callable[[str], Awaitable[Optional[str]]]) -> None:
    """``/compare``: the question, with the files attached to it, to every served model at once,
    side by side (app/conversation/compare.py); one message for the user's limits, each model's
    tokens settled against what it reserved."""
    if refused := _compare_refusal(question):
        await notice(refused, "compare_refused")
    elif (asked := await with_files(question)) is not None:
        await compare.run(question, compare.Job(
            ENGINES.all, HTTP, SETTINGS, cl.user_session.get("params"), lang(), COMPARE_COMMAND,
            spend_tokens, login_name(), cl.user_session.get("asked_at")), asked)


def _compare_refusal(question: str) -> Optional[str]:
    return compare.refusal(lang(), question, ENGINES.several, COMPARE_COMMAND)


async def send_export() -> None:
    model = (cl.user_session.get("engine_model") or (ENGINES.current().name,))[0]
    await export.send(cl.user_session.get("conversation"), cl.user_session.get("params"), model, lang())


async def share_chat(on: bool) -> None:
    """``/share``: a read-only link to this chat, with its QR code; ``/unshare`` takes it back."""
    layer = get_data_layer() if SETTINGS.chat_db is not None else None
    user = cl.context.session.user
    if layer is None or user is None:
        await notice(text(lang(), "share_needs_db"))
        return
    thread_id = cl.context.session.thread_id
    environ = cl.context.session.environ or {}
    address = chat_records.address(environ.get("asgi.scope"))  # the socket's request
    try:
        if not on:
            unshared = await share_links.unshare(layer, thread_id, user.identifier)
            if unshared:
                chat_records.audit(UNSHARE, user.identifier, address, thread_id)
            await notice(text(lang(), "unshared" if unshared else "unshare_none"))
            return
        origin = share_links.origin_for(SETTINGS.public_url, environ.get("HTTP_ORIGIN"), SETTINGS.app_url)
        share = await share_links.share(layer, thread_id, user.identifier, origin)
        chat_records.audit(SHARE, user.identifier, address, thread_id)
    except share_links.NothingToShare:
        await notice(text(lang(), "share_nothing"))
        return
    except share_links.NotOwner:
        await show_error(text(lang(), "share_not_owner"), "share_not_owner")
        return
    link = share.link(SETTINGS.public_url)
    qr = cl.Image(name="qr.png", content=share_qr.png(link), display="inline", size="small")
    await cl.Message(content=text(lang(), "shared", link=link, live=f"{live_page.PAGE}?shared={share.token}"),
                     elements=[qr], metadata={"kind": "share"}).send()
