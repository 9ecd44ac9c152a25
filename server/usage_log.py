"""Token counts of real chat requests, one JSON line each, for `plan --from-usage` and the
admin page; and the errors the chat showed, one line each, for the admin page.

Only counts, timings, the kind of an error and (with login on) the user's login name
are kept, never the text of a conversation.  Times are UTC.  Reading skips (and counts)
lines that are not valid records, so a log cut off by a crash or edited by hand still
gives advice instead of an error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator, Optional

from server.errors import MissingFile

FIELDS = ("prompt_tokens", "completion_tokens")
ERROR = "error"  # the field that makes a line an error's record, not a request's


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def append_usage(path: Path, prompt_tokens: int, completion_tokens: int,
                 ttft_s: Optional[float] = None, tokens_per_s: Optional[float] = None,
                 finish_reason: Optional[str] = None, at: Optional[dict] = None,
                 user: Optional[str] = None) -> None:
    """``at``: named moments of the request on the machine's monotonic clock, in seconds
    (``ReplyStats.stamps``), which a load test on the same machine lines up with its own."""
    record = {"time": now_utc(), "prompt_tokens": prompt_tokens,
              "completion_tokens": completion_tokens, "ttft_s": ttft_s,
              "tokens_per_s": tokens_per_s, "finish_reason": finish_reason}
    if at is not None:
        record["at"] = at
    _append(path, record, user)


def append_error(path: Path, kind: str, user: Optional[str] = None) -> None:
    """An error the chat showed, by its kind (its text's key in app/texts/)."""
    _append(path, {"time": now_utc(), ERROR: kind}, user)


def _append(path: Path, record: dict, user: Optional[str]) -> None:
    if user is not None:
        record["user"] = user
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record) + "\n").encode("utf-8")
    with open(path, "a+b") as handle:
        # A line cut short by a crash would swallow this record too: end it first.
        if handle.tell() > 0:
            handle.seek(-1, 2)
            if handle.read(1) != b"\n":
                line = b"\n" + line
        # One write() of one line: appends from concurrent chats do not interleave.
        handle.write(line)


def is_request(record) -> bool:
    return isinstance(record, dict) and all(
        type(record.get(f)) is int and record[f] >= 0 for f in FIELDS)  # not bool


def is_error(record) -> bool:
    return isinstance(record, dict) and isinstance(record.get(ERROR), str)


def lines(path: Path) -> Iterator[Optional[dict]]:
    """Each line's JSON object, or None for a line that is not one; blank lines are left out.
    Read as a stream: the log grows by a line per reply and is never rotated here."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            yield record if isinstance(record, dict) else None


def read_usage(path: Path) -> tuple[list[dict], int]:
    """(valid request records, number of lines skipped as unreadable); errors' records are
    neither."""
    if not path.exists():
        raise MissingFile(f"No usage log at {path}: the chat app writes it as people chat.")
    records, skipped = [], 0
    for record in lines(path):
        if is_request(record):
            records.append(record)
        elif not is_error(record):
            skipped += 1
    return records, skipped
