"""Where an app worker's CPU goes, by part of a message: a py-spy profile, split.

    .venv/bin/python benchmarks/app-cost-cpu/profile_split.py PROFILE.txt[.gz] [...]

PROFILE is py-spy's raw output (``record --format raw``: one line per distinct stack, frames
joined by ';', then the sample count) of one Chainlit worker: ``per_message_burst.py --profile``
here, or crowd.sh's ``burst-profile`` on the H200 (one of 8 workers through a 1,000-chat burst).

Each sample goes to the first part whose frames its stack holds (``PARTS``, in order), and each
part is marked as what a burst's later messages wait for (``before``: the work between a message
reaching the worker and its request leaving for vLLM, which the worker's loop does for every
message of the burst in turn) or not (``after``: the reply's stream and what follows it, done
while vLLM works; ``opening``: a chat's opening, before the burst; ``either``: the websocket's
writer, connections and the loop itself, for all of them). The loop's and the thread pool's
waits are left out. Why: docs/gpu-crowd.md, "tenth session".

Where py-spy reads coroutine stacks cut short (Python 3.12 on the H200, sampling without pausing
the worker: most stacks there are 1-4 frames), the parts cannot be told; the second table, the
package of each sample's innermost frame, still can.
"""

from __future__ import annotations

import gzip
import re
import sys
from collections import Counter
from pathlib import Path

IDLE = ("EpollSelector.select", "KqueueSelector.select", "_worker (concurrent/futures/thread.py")
# (name, when, frames any of which puts a sample there); the first that matches wins.
PARTS = (
    ("the OpenAI client's request", "before", ("AsyncCompletions.create",)),
    ("reading the reply's stream", "after", ("iter_lines", "sse_chunk", "TokenBatcher", "stream_token")),
    ("Regenerate's button", "after", ("app/regenerate.py",)),
    ("the reply's last send and figures", "after", ("stream_answer (app/chat.py",)),
    ("the chat's handler", "before", ("on_message (app/chat.py", "answer (app/chat.py")),
    ("Chainlit's run step, closed", "after", ("Step.__aexit__",)),
    ("Chainlit's message bookkeeping (task_start, the message, the run step)", "before",
     ("process_message (chainlit", "with_parent_id", "async_wrapper")),
    ("socket.io receiving the message", "before",
     ("_handle_eio_message", "websocket_wait", ";message (chainlit/socket.py")),
    ("opening chats (HTTP requests, the websocket's handshake, on_chat_start)", "opening",
     ("connection_successful", "connect (chainlit/socket.py", "on_chat_start", "run_asgi")),
    ("the websocket's writer (every emit)", "either", ("_websocket_handler.<locals>.writer", "_send_eio_packet")),
    ("connections and sockets (accept, vLLM's responses)", "either",
     ("_accept_connection", "_read_ready", "write_bytes", "connect_tcp")),
)
REST = ("the rest (the loop, timers, other tasks)", "either")  # a stack in no part
WHEN = dict([(name, when) for name, when, _ in PARTS] + [REST])


def samples(text: str) -> list[tuple[str, int]]:
    """(stack, count) per line of a raw py-spy profile."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append((stack, int(count)))
    return out


def part_of(stack: str) -> tuple[str, str]:
    """(part, when) of one stack; ("idle", "") for the loop's and the pool's waits."""
    if any(frame in stack for frame in IDLE):
        return "idle", ""
    for name, when, frames in PARTS:
        if any(frame in stack for frame in frames):
            return name, when
    return REST


def split(profile: list[tuple[str, int]]) -> tuple[Counter, Counter, int]:
    """(samples per part, samples per when, busy samples): the waits are not busy."""
    parts: Counter = Counter()
    whens: Counter = Counter()
    for stack, count in profile:
        name, when = part_of(stack)
        if name == "idle":
            continue
        parts[name] += count
        whens[when] += count
    return parts, whens, sum(parts.values())


def package_of(frame: str) -> str:
    """The package of a frame's file, as py-spy names it: ``f (socketio/async_server.py:12)``
    is socketio, ``f (app/chat.py:9)`` the app, ``f (typing.py:3)`` the module itself."""
    match = re.search(r"\(([^()]*?):\d+\)$", frame)
    path = match.group(1) if match else frame
    return path.split("/", 1)[0]


def packages(profile: list[tuple[str, int]]) -> Counter:
    """Busy samples by the package of the innermost frame."""
    out: Counter = Counter()
    for stack, count in profile:
        if part_of(stack)[0] != "idle":
            out[package_of(stack.rsplit(";", 1)[-1])] += count
    return out


def render(parts: Counter, whens: Counter, busy: int) -> str:
    if not busy:
        return "no busy samples"
    share = lambda n: f"{100 * n / busy:5.1f} %"
    lines = [f"{busy} busy samples"]
    lines += [f"  {share(n)}  {name} ({WHEN[name]})" for name, n in parts.most_common()]
    lines.append("  " + ", ".join(f"{when}: {share(whens[when]).strip()}" for when in ("before", "after", "opening", "either")))
    return "\n".join(lines)


def read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode(errors="replace")


def main(paths: list[str]) -> int:
    for path in paths:
        print(f"{path}:")
        profile = samples(read(Path(path)))
        print(render(*split(profile)))
        by_package = packages(profile)
        total = sum(by_package.values()) or 1
        print("  innermost frame's package: " + ", ".join(
            f"{name} {100 * n / total:.0f} %" for name, n in by_package.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
