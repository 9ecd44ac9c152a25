"""The worker's usage and audit records (server/chat_records.py): replies and errors also as lines
in this machine's usage log, and with saved chats (ERNIE_CHAT_DB) all of them as rows in the
chat database, which the admin page of every worker reads.

The rows are queued as they happen and written by one task, in batches: a reply never waits for
the database (the row of a reply is queued after it streamed), and under load one statement
carries many rows.  A row that cannot be written is logged and dropped, as Chainlit drops a step
it cannot write: the chat goes on.  Without a chat database nothing is queued: the usage log
holds the replies and errors, and no audit is kept.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable, Optional

from server.chat_records import INSERT_AUDIT, INSERT_USAGE, audit_row, usage_row
from server.usage_log import append_error, append_usage

log = logging.getLogger(__name__)


class Writer:
    """One queue of (statement, row); one task at a time writes what it holds."""

    def __init__(self) -> None:
        self.engine_of: Optional[Callable] = None  # the data layer's SQLAlchemy engine, once started
        self.pending: list[tuple[str, dict]] = []
        self.task: Optional[asyncio.Task] = None

    def add(self, statement: str, row: dict) -> None:
        if self.engine_of is None:
            return
        self.pending.append((statement, row))
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            try:
                await self._write(batch)
            except Exception as exc:  # the chat goes on without them
                log.warning("%d usage or audit record(s) could not be written to the chat database "
                            "and were dropped: %s: %s", len(batch), type(exc).__name__, exc)

    async def _write(self, batch: list[tuple[str, dict]]) -> None:
        from sqlalchemy import text
        async with self.engine_of().begin() as db:
            for statement in (INSERT_USAGE, INSERT_AUDIT):
                if rows := [row for kind, row in batch if kind == statement]:
                    await db.execute(text(statement), rows)


WRITER = Writer()


def start(engine_of: Callable) -> None:
    """Write rows into the chat database from now on; ``engine_of`` gives its engine."""
    WRITER.engine_of = engine_of


def reply(usage_log: Path, stats, user: Optional[str]) -> None:
    """A finished reply's figures (``app.engine.engine_client.ReplyStats``), unless the engine
    counted none."""
    if stats.prompt_tokens is None or stats.completion_tokens is None:
        return
    append_usage(usage_log, stats.prompt_tokens, stats.completion_tokens, stats.ttft_s,
                 stats.tokens_per_s, stats.finish_reason, stats.stamps(), user)
    WRITER.add(INSERT_USAGE, usage_row(user, stats.prompt_tokens, stats.completion_tokens, stats.ttft_s,
                                       stats.tokens_per_s, stats.finish_reason))


def error(usage_log: Path, kind: str, user: Optional[str]) -> None:
    """An error the chat showed, by its kind (its text's key in app/texts/)."""
    append_error(usage_log, kind, user)
    WRITER.add(INSERT_USAGE, usage_row(user, error=kind))


def audit(action: str, name: Optional[str], client_address: str, detail: str = "") -> None:
    """``client_address``: :func:`address` of the request."""
    WRITER.add(INSERT_AUDIT, audit_row(action, name, client_address, detail))


def address(scope: Optional[dict]) -> str:
    """The client address of a request's ASGI scope: uvicorn put a trusted proxy's
    X-Forwarded-For there (ERNIE_TRUSTED_PROXIES, and loopback), else it is the connection's."""
    client = (scope or {}).get("client")
    return str(client[0]) if client else "unknown"
