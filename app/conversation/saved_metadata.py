"""A saved chat's metadata (its thread's, or a step's) as the database gives it back: a dict,
or on SQLite the JSON text of one."""

from __future__ import annotations

import json


def saved_metadata(metadata) -> dict:
    metadata = metadata or {}
    return json.loads(metadata) if isinstance(metadata, str) else dict(metadata)


def step_metadata(step: dict) -> dict:
    return saved_metadata(step.get("metadata"))
