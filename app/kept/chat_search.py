"""Searching saved chats from the sidebar (Chainlit's search box, Ctrl+K).

Chainlit's box posts its text as ``filter.search`` to ``/project/threads``, whose data
layer filters the user's chats by it.  Here every word of the query must be found (in
any order, each in the chat's title or in any of its messages and replies), compared
after NFKC and case folding, so "ＥＲＮＩＥ" finds "ernie" and Chinese is found inside
text without spaces.  The words are compared in Python, never put into SQL: a ``%`` or
``_`` is only itself.  The figures line under a reply (texts.FIGURES_MARK) is not
searched: every reply has one.

Only the logged-in user's chats: this module's route answers ``/project/threads``
before Chainlit's, drops any ``userId`` the request's body carries, and hands on to
Chainlit's handler, which sets it from the session's user (docs/notes.md, "Chainlit
2.12").
"""

from __future__ import annotations

import unicodedata

from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
from chainlit.server import UserParam, app, get_user_threads
from chainlit.types import GetThreadsRequest, PageInfo, PaginatedResponse, Pagination, ThreadFilter
from fastapi import HTTPException, Request

from app.conversation.saved_metadata import saved_metadata, step_metadata
from app.kept import admitted_steps, saved_prompts
from app.texts import lang_of, text, without_figures

PATH = "/project/threads"
# A person types a few words; a longer query is a script's, and each costs a pass over
# every message of the user's chats.
MAX_QUERY_CHARS = 200


class SearchTooLong(ValueError):
    def __init__(self, length: int):
        super().__init__(f"{length} characters, limit {MAX_QUERY_CHARS}")


def folded(value: str) -> str:
    """Text as it is compared: compatibility forms (full width, ligatures) and case folded."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())


def query_words(query: str) -> list[str]:
    if len(query) > MAX_QUERY_CHARS:
        raise SearchTooLong(len(query))
    return folded(query).split()


def searched_texts(thread: dict) -> list[str]:
    """A chat's title, what the user wrote and the replies, without their figures lines;
    not the welcome, notices or errors, which many chats share."""
    texts = [thread.get("name") or ""]
    for step in thread.get("steps") or []:
        reply = step.get("type") == "assistant_message" and step_metadata(step).get("kind") == "reply"
        if step.get("type") == "user_message" or reply:
            texts.append(without_figures(step.get("output") or ""))
    return texts


def matches(words: list[str], texts: list[str]) -> bool:
    # A word holds no whitespace, so none can run across the line between two texts.
    haystack = "\n".join(folded(t) for t in texts)
    return all(word in haystack for word in words)


def page(threads: list[dict], pagination: Pagination) -> PaginatedResponse:
    """A page of the found chats, after ``pagination.cursor`` (a chat's id) as Chainlit pages."""
    ids = [t["id"] for t in threads]
    start = ids.index(pagination.cursor) + 1 if pagination.cursor in ids else 0
    shown = threads[start:start + pagination.first]
    return PaginatedResponse(
        pageInfo=PageInfo(hasNextPage=len(threads) > start + pagination.first,
                          startCursor=shown[0]["id"] if shown else None,
                          endCursor=shown[-1]["id"] if shown else None),
        data=shown)


class SearchingLayer(SQLAlchemyDataLayer):
    """Chainlit's SQLAlchemy data layer whose thread list searches as above, whose chats
    carry their metadata as a dict on SQLite too, which writes a user's message only once it
    is admitted (app/kept/admitted_steps.py), and which finds a user's saved prompts on
    PostgreSQL too (app/kept/saved_prompts.py)."""

    async def create_step(self, step_dict):
        # Chainlit's update_step writes through this method too.
        if await admitted_steps.kept(step_dict):
            await super().create_step(step_dict)

    async def get_favorite_steps(self, user_id: str):
        return await saved_prompts.starred(self, user_id)

    async def get_all_user_threads(self, user_id=None, thread_id=None):
        # On SQLite the column comes back as JSON text, and a reopened chat reaches the browser
        # so: its menu could not read the chat's profile (the model it runs on) from it, and
        # Chainlit could not star one of its messages (app/kept/saved_prompts.py).
        threads = await super().get_all_user_threads(user_id=user_id, thread_id=thread_id)
        for thread in threads or []:
            thread["metadata"] = saved_metadata(thread.get("metadata"))
            for step in thread.get("steps") or []:
                step["metadata"] = step_metadata(step)
        return threads

    async def list_threads(self, pagination: Pagination, filters: ThreadFilter) -> PaginatedResponse:
        words = query_words(filters.search or "")
        if not words:
            return await super().list_threads(pagination, filters.model_copy(update={"search": None}))
        if not filters.userId:  # no user, no chats: nothing is searched across users
            return page([], pagination)
        # The user's own only, checked again: Chainlit's query may also take a chat by its id.
        found = [t for t in await self.get_all_user_threads(user_id=filters.userId) or []
                 if t.get("userId") == filters.userId and matches(words, searched_texts(t))]
        return page(found, pagination)


async def threads_listed(request: Request, payload: GetThreadsRequest, current_user: UserParam):
    payload.filter.userId = None  # never the body's: Chainlit's handler sets the session's user
    try:
        return await get_user_threads(request, payload, current_user)
    except SearchTooLong:
        lang = lang_of(request.headers.get("accept-language"))
        raise HTTPException(status_code=400,
                            detail=text(lang, "search_too_long", limit=MAX_QUERY_CHARS)) from None


def install() -> None:
    """Put the route before Chainlit's for the same path (routes match in order)."""
    app.add_api_route(PATH, threads_listed, methods=["POST"])
    app.router.routes.insert(0, app.router.routes.pop())
