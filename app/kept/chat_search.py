"""Searching saved chats from the sidebar (Chainlit's search box, Ctrl+K).

Chainlit's box posts its text as ``filter.search`` to ``/project/threads``, whose data
layer filters the user's chats by it.  Here every word of the query must be found (in
any order, each in the chat's title or in any of its messages and replies), compared
after NFKC and case folding, so "ＥＲＮＩＥ" finds "ernie" and Chinese is found inside
text without spaces.  The figures line under a reply (texts.FIGURES_MARK) is not
searched: every reply has one.  The chats are found through the search's index, which
the data layer below keeps (app/kept/search_index.py); the words are bound parameters,
never SQL: a ``%`` or ``_`` is only itself.

Only the logged-in user's chats: this module's route answers ``/project/threads``
before Chainlit's, drops any ``userId`` the request's body carries, and hands on to
Chainlit's handler, which sets it from the session's user (docs/notes.md, "Chainlit
2.12").
"""

from __future__ import annotations

from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
from chainlit.data.utils import queue_until_user_message
from chainlit.server import UserParam, app, get_user_threads
from chainlit.types import GetThreadsRequest, PageInfo, PaginatedResponse, Pagination, ThreadFilter
from fastapi import HTTPException, Request

from app.conversation.saved_metadata import saved_metadata, step_metadata
from app.kept import admitted_steps, saved_prompts, search_index
from app.texts import lang_of, text

PATH = "/project/threads"
# A person types a few words; a longer query is a script's, and each word costs a lookup.
MAX_QUERY_CHARS = 200


class SearchTooLong(ValueError):
    def __init__(self, length: int):
        super().__init__(f"{length} characters, limit {MAX_QUERY_CHARS}")


def query_words(query: str) -> list[str]:
    if len(query) > MAX_QUERY_CHARS:
        raise SearchTooLong(len(query))
    return search_index.folded(query).split()


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
    """Chainlit's SQLAlchemy data layer whose thread list searches as above, through the
    search's index, which it keeps up to date as it writes; whose chats carry their metadata
    as a dict on SQLite too; which writes a user's message only once it is admitted
    (app/kept/admitted_steps.py); and which finds a user's saved prompts on PostgreSQL too
    (app/kept/saved_prompts.py)."""

    async def create_step(self, step_dict):
        # Chainlit's update_step writes through this method too.
        if await admitted_steps.kept(step_dict):
            await super().create_step(step_dict)
            if search_index.may_be_searched(step_dict):
                await self._index_step(step_dict["id"])

    async def delete_step(self, step_id: str):
        await super().delete_step(step_id)
        await self._index_step(step_id)

    @queue_until_user_message()
    async def _index_step(self, step_id: str):
        # Queued as Chainlit queues the step's own write (before a chat's first message) and
        # run after it: the row follows the step as it is stored then, or gone.
        await search_index.write_step(self, step_id)

    async def update_thread(self, thread_id: str, name=None, user_id=None, metadata=None, tags=None):
        await super().update_thread(thread_id, name=name, user_id=user_id, metadata=metadata, tags=tags)
        if name is not None or (metadata or {}).get("name") is not None:  # Chainlit's name, either way
            await search_index.write_title(self, thread_id)

    async def delete_thread(self, thread_id: str):
        await super().delete_thread(thread_id)
        await search_index.forget_chat(self, thread_id)

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
        found = page([{"id": i} for i in await search_index.found_chats(self, filters.userId, words)],
                     pagination)
        found.data = await search_index.chats(self, [t["id"] for t in found.data])
        return found


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
