"""The Regenerate button under the last reply (or under the stop notice or error that
ended it): one at a time, withdrawn as soon as a new answer starts."""

from __future__ import annotations

import chainlit as cl

from app.texts import text

ACTION = "regenerate"


async def offer(lang: str) -> None:
    """Put the button under the last message the chat showed."""
    shown = [m for m in cl.chat_context.get() if m.type == "assistant_message"]
    if not shown:
        return
    action = cl.Action(name=ACTION, payload={}, label=text(lang, "regenerate"),
                       tooltip=text(lang, "regenerate_tip"), icon="refresh-cw")
    await action.send(for_id=shown[-1].id)
    cl.user_session.set("regenerate_action", action)


async def withdraw() -> None:
    action = cl.user_session.get("regenerate_action")
    if action is not None:
        cl.user_session.set("regenerate_action", None)
        await action.remove()
