"""Work the chat starts outside Chainlit's own handlers, made to behave like a message's.

Chainlit runs an action's callback inside its HTTP request: no Stop button, and
Stop cannot cancel it (docs/notes.md, "Chainlit 2.12").  :func:`start_stoppable`
runs such work as a task that announces itself as a message's does (task_start /
task_end: the Stop button shows, the composer waits) and is registered where Stop
looks for it.  :func:`after_start` holds back the chat's first message until
on_chat_start's task has ended, so the composer only appears once it can send.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Coroutine

import chainlit as cl


def running() -> bool:
    """Whether a reply (from a message, an edit or a regeneration) is still being made."""
    task = cl.user_session.get("task")
    return task is not None and not task.done()


def start_stoppable(work: Callable[[], Awaitable[None]]) -> asyncio.Task:
    async def run() -> None:
        await cl.context.emitter.task_start()
        try:
            await work()
        except asyncio.CancelledError:
            pass  # Stop: the work has already shown what it kept
        finally:
            await cl.context.emitter.task_end()

    task = asyncio.create_task(run())  # copies the contextvars: the same Chainlit session
    cl.context.session.current_task = task  # Chainlit's own Stop handler cancels this one
    cl.user_session.set("task", task)  # and the app's on_stop cancels this one
    return task


def after_start(first_message: Coroutine) -> None:
    """Send the chat's first message after on_chat_start, i.e. after Chainlit's task_end.

    The browser swaps composers when the first message arrives; sent from on_chat_start
    itself, it arrives before task_end, and a message typed in that gap cannot be sent.
    """
    start = asyncio.current_task()

    async def send() -> None:
        await asyncio.wait({start})
        await first_message

    asyncio.create_task(send())
