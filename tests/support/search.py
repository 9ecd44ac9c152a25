"""Saved chats written as the chat writes them, for the search tests."""

from __future__ import annotations

import datetime as dt
import uuid

from app.kept.chat_search import SearchingLayer
from app.kept.saved_chats import data_layer
from app.texts import FIGURES_MARK
from chainlit.types import Pagination, ThreadFilter
from server import chat_db

FIGURES = "120 ms to first token · 10.0 tok/s · 20 prompt + 11 reply tokens*"
# Each user's chats: (title, what the user wrote, the reply).
CHATS = {
    "alice": [
        ("Apricot jam", "How long do I boil apricots?", "About twenty minutes, stirring."),
        ("Trip planning", "Where to go in Kyoto?", "The temples at dawn; the ＥＲＮＩＥ museum too."),
        ("机器学习", "什么是深度学习？", "深度学习是机器学习的一个分支。"),
        ("Discounts", "Is 50% off a good deal?", "It depends on the_price before."),
    ],
    "bob": [("Bob's secret", "my zeppelin password", "Keep your zeppelin password private.")],
}


# --- the real app, through HTTP -------------------------------------------------------------

async def write_chats(target) -> dict[str, str]:
    """The users' chats, as the chat saves them; their ids by title."""
    from chainlit.user import User

    layer = data_layer(target)
    # Without the chat's websocket session there is no Chainlit context: the method itself,
    # not its wrapper that waits for the session's first message.
    create_step = type(layer).create_step.__wrapped__
    ids = {}
    try:
        for name, chats in CHATS.items():
            user = await layer.create_user(User(identifier=name))
            for title, asked, reply in chats:
                thread = ids[title] = str(uuid.uuid4())
                await layer.update_thread(thread, name=title, user_id=user.id)
                for n, (kind, output, metadata) in enumerate((
                        ("user_message", asked, {}),
                        ("assistant_message", reply + FIGURES_MARK + FIGURES, {"kind": "reply"}))):
                    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=n)).isoformat()
                    await create_step(layer, {"id": str(uuid.uuid4()), "name": name, "type": kind,
                                              "threadId": thread, "output": output, "metadata": metadata,
                                              "streaming": False, "createdAt": at})
    finally:
        await layer.engine.dispose()
    return ids


async def starred(target, name: str) -> list[str]:
    """The texts of ``name``'s saved prompts (starred messages), as the chat's data layer finds them."""
    layer = data_layer(target, SearchingLayer)
    try:
        user = await layer.get_user(name)
        return [step["output"] for step in await layer.get_favorite_steps(user.id)]
    finally:
        await layer.engine.dispose()


# --- through the app's data layer, which keeps the search's index -------------------------------

def step_of(thread: str, kind: str, output: str, n: int = 0, reply: bool = True) -> dict:
    """A saved message (``user_message``) or reply, its figures line added, ``n`` seconds later."""
    at = (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=n)).isoformat()
    metadata = {"kind": "reply"} if kind == "assistant_message" and reply else {}
    if kind == "assistant_message" and reply:
        output += FIGURES_MARK + FIGURES
    return {"id": str(uuid.uuid4()), "name": "x", "type": kind, "threadId": thread, "output": output,
            "metadata": metadata, "streaming": False, "createdAt": at}


async def chat_written(layer, user_id: str, title: str, asked: str, reply: str) -> list[dict]:
    """One chat written as the chat writes it, through ``layer``: its thread, then its steps."""
    thread = str(uuid.uuid4())
    await layer.update_thread(thread, name=title, user_id=user_id)
    steps = [step_of(thread, "user_message", asked, 0), step_of(thread, "assistant_message", reply, 1)]
    for step in steps:
        await layer.create_step(step)
    return steps


async def titles_found(layer, user_id: str, query: str) -> set[str]:
    listed = await layer.list_threads(Pagination(first=100), ThreadFilter(userId=user_id, search=query))
    return {t["name"] for t in listed.data}


async def open_searching_layer(target: str):
    """The app's data layer on a prepared database, outside a chat's websocket session (so
    Chainlit writes at once), and a user of it."""
    from chainlit.context import init_http_context
    from chainlit.user import User
    chat_db.prepare_db(target)
    init_http_context()
    layer = data_layer(target, SearchingLayer)
    user = await layer.create_user(User(identifier=f"searcher-{uuid.uuid4().hex[:8]}"))
    return layer, user.id


def found_by(target: str, chat: tuple[str, str, str], queries: list[str]) -> list[bool]:
    """Whether one chat (title, message, reply), written into ``target``, is found by each query."""
    import asyncio

    async def run() -> list[bool]:
        layer, user_id = await open_searching_layer(target)
        try:
            await chat_written(layer, user_id, *chat)
            return [bool(await titles_found(layer, user_id, query)) for query in queries]
        finally:
            await layer.engine.dispose()
    return asyncio.run(run())
