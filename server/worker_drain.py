"""What the supervisor and an app worker agree on to drain the worker (app/kept/drain.py)."""

from __future__ import annotations

PATH = "/_ernie/drain"
# The supervisor hands each worker a token of its own in this variable; only its holder
# may drain the worker or read its figures.
TOKEN_ENV = "ERNIE_DRAIN_TOKEN"


def drained(figures: dict) -> bool:
    """True once the worker streams no reply and holds no chat's socket."""
    return figures.get("streaming") == 0 and figures.get("connected") == 0
