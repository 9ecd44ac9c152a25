"""Fair shares: how much one user may ask and upload, and what a new message meets when the
engine is full."""

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
    replies_per_user: int = Field(
        0, ge=0, description="Replies one user may have running at once on one app worker (a user: "
        "the login name, else the client's address; a regeneration and a /compare count as one); "
        "a message past it is told so, and not answered or saved. 2 suits a team's network; off by "
        "default, as the other limits, because a load test sends every chat as one user (qa-load "
        "with one --login, or without --own-addresses). 0: no cap.")
    busy_queue: Optional[int] = Field(
        None, ge=0, description="Requests waiting in vLLM's queue above which a new message is told "
        "how many are ahead and about how long it will wait (ERNIE_BUSY_ACTION). Unset: never.")
    busy_action: Literal["wait", "refuse"] = Field(
        "wait", description="When the queue is longer than ERNIE_BUSY_QUEUE: `wait` shows the "
        "wait and answers anyway, `refuse` says when to try again and does not answer.")
    upload_files_per_chat: int = Field(
        10, ge=0, description="Attached files one chat may hold on the server before they are "
        "sent with a message (a file is deleted once read); past it an upload is refused with what "
        "to do. 0: no cap.")
    upload_mb_per_chat: int = Field(
        60, ge=0, description="MiB of attached files one chat may hold before they are sent. 0: no cap.")
    upload_files_per_user: int = Field(
        30, ge=0, description="Attached files one user may hold over all their chats on one app "
        "worker before they are sent (a user: the login name, else the client's address); a chat "
        "whose browser left holds its files for an hour. 0: no cap.")
    upload_mb_per_user: int = Field(
        200, ge=0, description="MiB of attached files one user may hold over all their chats on one "
        "app worker before they are sent. 0: no cap.")
    upload_disk_free_mb: int = Field(
        1024, ge=0, description="Uploads are refused while they would leave less than this many "
        "MiB free on the disk that keeps them (the checkout's .files). 0: no floor.")

    # A watcher's page reloads itself every 10 s and asks for its QR code each time: 12
    # requests a minute. 240 serves 20 watchers behind one address (an office's NAT, a room's
    # Wi-Fi), and one address costs a worker at most 4 look-ups a second.
    shared_requests_per_min: int = Field(
        240, ge=0, description="Requests one client address (an IPv4 address, an IPv6 /64) may "
        "make per minute to shared chats' pages and their QR codes (/shared/...), counted by each "
        "app worker on its own; past it the answer is 429 with Retry-After. A watcher's page "
        "asks 12 times a minute. 0: no limit.")

    def problems(self) -> list[str]:
        return []
