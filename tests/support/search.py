"""Saved chats written as the chat writes them, for the search tests."""

from __future__ import annotations

import datetime as dt
import uuid

from app.kept.chat_search import SearchingLayer
from app.kept.saved_chats import data_layer
from app.texts import FIGURES_MARK

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
