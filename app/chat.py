"""The Chainlit chat: streams replies from the engine, fitted to its context window.

Run by the supervisor as ``python -m app.serve run app/chat.py --headless`` (Chainlit's
CLI without nest_asyncio: app/serve.py).  Here are Chainlit's handlers only, each thin: what
they stand on is set up in app/wiring.py, what every chat of the worker shares is in
app/worker.py, and the packages hold the rest (docs/architecture.md): a message answered in
app/conversation/ (answer.py), a chat carried over from another worker or reopened in
app/kept/ (carry_over.py), the typed commands (/status, /compare ...) in app/commands.py.

Only real exchanges enter the model's history (:class:`Conversation`).  Every
other message the chat shows (welcome, notices, errors, figures) is marked
``metadata={"kind": ...}`` so a resumed chat can tell them apart.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

import chainlit as cl

import app.web.chainlit_speed  # noqa: F401  (Chainlit without its 1 ms sleeps, before any message)
import app.web.socketio_emit  # noqa: F401  (an emit to one chat without a task per frame)
import app.wiring  # noqa: F401  (the routes, middlewares, login and saved chats, before any chat)
from app import chat_metrics, commands
from app.conversation import admission, regenerate, switcher
from app.conversation.answer import answer, clean_text, reply_text, with_attachments
from app.conversation.chat_settings import MAX_SEED, BadSeed, apply, restored
from app.conversation.chat_state import engine_model, max_reply_budget, send_panel, start_session, use_params
from app.conversation.history import Conversation
from app.conversation.notices import lang, notice, notices_after, say_error, show_error
from app.conversation.personas import persona, profiles
from app.engine import server_info
from app.kept import admitted_steps, carry_over, saved_chats
from app.kept.stores import CHAT_FILES, remember, reply_store
from app.pages import live_page
from app.texts import lang_of, text
from app.web import session_tasks
from app.worker import ENGINES, SETTINGS

RESUME_NOTICE_DELAY_S = 1.0
# Chainlit's Stop handler posts this hard-coded English text; on_stop takes it back so that
# only the chat's own, translated notice remains (docs/notes.md, "Chainlit 2.12").
CHAINLIT_STOP_MESSAGE = "Task manually stopped."


@cl.set_chat_profiles
async def set_chat_profiles(user: Optional[cl.User] = None, language: Optional[str] = None):
    return profiles(ENGINES, lang_of(language))


@cl.on_chat_start
async def on_chat_start() -> None:
    chat_metrics.chat_opened()
    mapped = ENGINES.settle(lang())  # first: a forged profile picks no persona either
    chosen = persona(cl.user_session.get("chat_profile"))
    start_session(Conversation(chosen.system_prompt or SETTINGS.system_prompt))
    if mapped:
        await notice(mapped, "model_unknown")
    if carry_over.moved_here():
        kept = CHAT_FILES is not None and carry_over.carry_over()
        # "kept": the chat goes on with its history and reply (qa-load waits for the reply).
        await notice(text(lang(), "moved_kept" if kept else "moved"), "moved", kept=kept)
    if (engine := ENGINES.current()).asleep():  # its first message starts it: nothing to ask yet
        await send_panel()
        session_tasks.after_start(notice(text(lang(), "model_asleep", model=engine.name), "welcome"))
        return
    try:
        await engine_model()
    except Exception as exc:  # the chat still opens; the message says what is wrong
        await send_panel()
        session_tasks.after_start(say_error(exc))
        return
    await send_panel()
    welcome = (server_info.describe(lang(), cl.user_session.get("server"))
               + "\n\n" + text(lang(), "live_link", path=live_page.PAGE))
    if cl.user_session.get("is_demo"):
        welcome += "\n\n" + text(lang(), "demo")
    session_tasks.after_start(notice(welcome, "welcome"))  # the composer appears when it can send


@cl.on_settings_update
async def on_settings_update(values: dict) -> None:
    try:
        params = apply(values, cl.user_session.get("params"), max_reply_budget(), SETTINGS.system_prompt)
    except BadSeed as exc:
        await show_error(text(lang(), "bad_seed", value=exc.value, max=MAX_SEED), "bad_seed")
        return
    use_params(params)
    remember()
    if params.system_prompt != str(values.get("system_prompt", params.system_prompt)):
        await send_panel()  # a persona chosen: the prompt field shows its prompt
    if SETTINGS.chat_db is not None:
        await saved_chats.save_settings(cl.context.session)


@cl.on_message
async def on_message(message: cl.Message) -> None:
    # Stop must reach this task whatever path started it (docs/notes.md: Chainlit does not
    # register every re-run); on_stop cancels it itself.
    cl.user_session.set("task", asyncio.current_task())
    cl.user_session.set("asked_at", time.perf_counter())  # for the usage log's stamps
    chat_metrics.message_received()
    # Saved (and making the chat) only once admitted, a command too (app/kept/admitted_steps.py).
    with admitted_steps.deciding(message.id) as decision:
        await regenerate.withdraw()
        if not message.content.strip() and not message.elements:
            await show_error(text(lang(), "empty"), "empty", saved=False)  # nor is the message
            return
        message.content = clean_text(message.content)  # a command's text too
        command = commands.command_of(message.content)
        ask = commands.ask_of(command) if command else admission.message_ask(message.content)
        async with admission.admitted(ask) as admitted:
            if not admitted:
                return
            decision.keep(message.content)
            if command:
                await commands.run(command, lambda typed: with_attachments(message, typed))
                return
            user_text = await with_attachments(message, message.content)
            if user_text is not None:
                too_long = "too_long_files" if message.elements else "too_long"
                await answer(message.id, user_text, reply_store(), too_long)


@cl.action_callback(regenerate.ACTION)
async def on_regenerate(action: cl.Action) -> None:
    asked = cl.user_session.get("conversation").last_asked()
    if asked is None or session_tasks.running():
        return
    cl.user_session.set("asked_at", time.perf_counter())
    await regenerate.withdraw()

    async def regenerated() -> None:
        # Admitted in the task itself: what it holds comes back however the task ends.
        async with admission.admitted(admission.message_ask(asked[1])) as admitted:
            if not admitted:
                await regenerate.offer(lang())
                return
            await switcher.clear_after(asked[0])  # the new reply takes the old one's place, as an edit's does
            await answer(*asked, reply_store())
    session_tasks.start_stoppable(regenerated)


@cl.action_callback(switcher.ACTION)
async def on_version(action: cl.Action) -> None:
    if not session_tasks.running() and await switcher.switch(action, cl.user_session.get("conversation"),
                                                               reply_text, lang()):
        remember()


@cl.on_stop
async def on_stop() -> None:
    # Stop reaches the reply whatever started it: a message, an edit (which Chainlit does
    # not register) or a regeneration (docs/notes.md, "Chainlit 2.12").
    task: Optional[asyncio.Task] = cl.user_session.get("task")
    if task is not None and not task.done():
        task.cancel()
    for shown in reversed(cl.chat_context.get()):
        if shown.type == "assistant_message" and shown.content == CHAINLIT_STOP_MESSAGE:
            await shown.remove()
            break


@cl.on_app_shutdown
async def on_app_shutdown() -> None:
    # aiohttp (the client's transport) reports a session still open at exit on stderr.
    await ENGINES.close()


@cl.on_chat_end
async def on_chat_end() -> None:
    # Chainlit keeps every message of a chat in chat_context and never frees it (docs/notes.md).
    cl.chat_context.clear()
    chat_metrics.chat_closed()


if SETTINGS.chat_db is not None:
    @cl.on_chat_resume
    async def on_chat_resume(thread: dict) -> None:
        chosen = persona(saved_chats.thread_profile(thread))
        chat_metrics.chat_opened()
        conversation, versions = saved_chats.conversation_from_thread(
            thread, chosen.system_prompt or SETTINGS.system_prompt)
        start_session(conversation)
        switcher.restore(versions)
        # Chainlit put the thread's saved panel values (metadata) in the session: the chat
        # goes on with the settings it was made with, and the panel shows them.
        if saved := cl.context.session.chat_settings:
            use_params(restored(saved, cl.user_session.get("params"), max_reply_budget()))
        await send_panel()
        session_tasks.after_start(carry_over.carry_on(thread))
        session_tasks.after_start(switcher.offer_all(lang()))  # on the replies the page shows then
        # Chainlit sends the saved steps right after this returns, and the browser replaces
        # what it shows with them: a notice sent now would vanish, so the notices follow them.
        if told := carry_over.reopened_notices():
            asyncio.create_task(notices_after(RESUME_NOTICE_DELAY_S, told))
