"""Writing chosen settings into a .env file without disturbing the rest of it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from server.private_files import write_private


def updated_env_text(text: str, values: dict[str, Optional[str]]) -> str:
    """``text`` of a .env file with ``values`` set: existing keys changed in place, others
    appended; comments, blank lines and every other line kept as they are.  A value of
    None unsets its key: the line becomes a comment (nothing to do where there is none)."""
    lines = text.splitlines()
    left = dict(values)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#") or "=" not in stripped:
            continue
        key = stripped.split("=", 1)[0].removeprefix("export ").strip()
        if key in left and left[key] is None:
            left.pop(key)
            lines[i] = f"# {stripped}  (unset by `ernie-chat tune`: the engine's own choice)"
        elif key in left:
            prefix = "export " if stripped.startswith("export ") else ""
            lines[i] = f"{prefix}{key}={left.pop(key)}"
    left = {k: v for k, v in left.items() if v is not None}
    if left:
        lines += ["", f"# set by `ernie-chat tune` on {time.strftime('%Y-%m-%d %H:%M')}"]
        lines += [f"{k}={v}" for k, v in left.items()]
    return "\n".join(lines) + "\n"


def write_env(path: Path, values: dict[str, Optional[str]]) -> None:
    """The file holds passwords and keys (ERNIE_USERS, ERNIE_API_KEY): its owner's only."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    write_private(path, updated_env_text(text, values))
