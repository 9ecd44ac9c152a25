"""Token counts of real chat requests, one JSON line each, for `plan --from-usage`.

Only counts and timings are kept, never the text of a conversation.  Reading
skips (and counts) lines that are not valid records, so a log cut off by a
crash or edited by hand still gives advice instead of an error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from server.errors import MissingFile

FIELDS = ("prompt_tokens", "completion_tokens")


def append_usage(path: Path, prompt_tokens: int, completion_tokens: int,
                 ttft_s: Optional[float] = None, tokens_per_s: Optional[float] = None,
                 finish_reason: Optional[str] = None, at: Optional[dict] = None) -> None:
    """``at``: named moments of the request on the machine's monotonic clock, in seconds
    (``ReplyStats.stamps``), which a load test on the same machine lines up with its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "prompt_tokens": prompt_tokens,
              "completion_tokens": completion_tokens, "ttft_s": ttft_s,
              "tokens_per_s": tokens_per_s, "finish_reason": finish_reason}
    if at is not None:
        record["at"] = at
    line = (json.dumps(record) + "\n").encode("utf-8")
    with open(path, "a+b") as handle:
        # A line cut short by a crash would swallow this record too: end it first.
        if handle.tell() > 0:
            handle.seek(-1, 2)
            if handle.read(1) != b"\n":
                line = b"\n" + line
        # One write() of one line: appends from concurrent chats do not interleave.
        handle.write(line)


def read_usage(path: Path) -> tuple[list[dict], int]:
    """(valid records, number of lines skipped as unreadable)."""
    if not path.exists():
        raise MissingFile(f"No usage log at {path}: the chat app writes it as people chat.")
    records, skipped = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if all(type(record.get(f)) is int and record[f] >= 0 for f in FIELDS):  # not bool
                records.append(record)
                continue
        except (ValueError, AttributeError):
            pass
        skipped += 1
    return records, skipped
