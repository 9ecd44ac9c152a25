"""Fair shares: how much one user may ask, and what a new message meets when the engine is full."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field


class LimitSettings(BaseModel):
    user_messages_per_min: int = Field(
        0, ge=0, description="Messages one user may send per minute, across all app workers (a "
        "user: the login name, else the client's address); over it the chat says when to try "
        "again. 0: no limit.")
    user_tokens_per_day: int = Field(
        0, ge=0, description="Prompt plus reply tokens one user may spend in any 24 hours, across "
        "all app workers; over it the chat says when to try again. 0: no limit.")
    busy_queue: Optional[int] = Field(
        None, ge=0, description="Requests waiting in vLLM's queue above which a new message is told "
        "how many are ahead and about how long it will wait (ERNIE_BUSY_ACTION). Unset: never.")
    busy_action: Literal["wait", "refuse"] = Field(
        "wait", description="When the queue is longer than ERNIE_BUSY_QUEUE: `wait` shows the "
        "wait and answers anyway, `refuse` says when to try again and does not answer.")

    def problems(self) -> list[str]:
        return []
