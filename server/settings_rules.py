"""What makes a setting valid, in words the person who set it understands.

The Settings class (server/settings.py) attaches these checks to its fields and
runs ``disagreements`` over the whole; each raises or returns a message that
names the variable, what is wrong, and what to set instead.  Pure functions:
each is tested with the values a user would type.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from typing import Optional

from pydantic import SecretStr

from server.passwords import looks_like_broken_hash

MAX_NGRAM_DRAFT_TOKENS = 16
# What a browser sends as Origin: no path, no trailing slash.
ORIGIN = re.compile(r"https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
POSTGRES_PREFIXES = ("postgresql://", "postgres://", "postgresql+asyncpg://")


def utilization(value: float) -> float:
    # pydantic's gt/le would say "greater than 0"; the operator needs to know why.
    if not 0 < value <= 1:
        raise ValueError("must be greater than 0 and at most 1: it is the fraction of the GPU's "
                         "total memory vLLM may use (0.9 leaves about 10% for other programs)")
    return value


def shell_words(value: str) -> str:
    try:
        shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"is not valid shell quoting ({exc})") from exc
    return value


def engine_url(value: Optional[str]) -> Optional[str]:
    if value in (None, ""):
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https:// (e.g. http://127.0.0.1:8000)")
    return value.rstrip("/").removesuffix("/v1")


def chat_db(value) -> Optional[str]:
    if value in (None, ""):
        return None
    text = str(value)
    if "://" in text and not text.startswith(POSTGRES_PREFIXES):
        raise ValueError("must be a SQLite file path (data/chats.db) or a PostgreSQL URL "
                         "(postgresql://user:password@host:5432/dbname)")
    return text


def index_url(value: str) -> str:
    if not value.startswith(("http://", "https://", "file://")):
        raise ValueError("must be a package index URL starting with http://, https:// or "
                         "file:// (e.g. https://download.pytorch.org/whl/cpu)")
    return value


def user_pairs(value: Optional[SecretStr]) -> Optional[SecretStr]:
    if value is None or not value.get_secret_value().strip():
        return None
    for pair in value.get_secret_value().split(","):
        name, sep, password = pair.strip().partition(":")
        if not (sep and name.strip() and password):
            # Never echo the value: it holds passwords.
            raise ValueError("must be user:password pairs separated by commas, "
                             "e.g. alice:pw1,bob:pw2 (a pair is missing its name or password)")
        if looks_like_broken_hash(password):
            raise ValueError(f"the password of {name.strip()!r} starts like a bcrypt hash but is "
                             "not a whole one (60 characters): copy the whole line "
                             "`ernie-chat hash-password` printed, in single quotes in a shell "
                             "(double quotes let the shell eat the $ parts)")
    return value


def origins(value: str) -> str:
    """The origins, comma-separated, in lower case as browsers send them."""
    found = [origin.strip().lower() for origin in value.split(",") if origin.strip()]
    for origin in found:
        if not ORIGIN.fullmatch(origin):
            # A wildcard with cookies would let any web page act as the logged-in user.
            raise ValueError(f"{origin!r} is not an origin: write each as scheme://host or "
                             "scheme://host:port, without a path or a wildcard "
                             "(e.g. https://intranet.example.com)")
    return ",".join(found)


def ngram_draft_tokens(value: object) -> object:
    text = str(value).strip().lower()
    if text in ("off", ""):
        return "off"
    if not text.isdigit() or not 1 <= int(text) <= MAX_NGRAM_DRAFT_TOKENS:
        raise ValueError(f"must be off or a whole number of draft tokens from 1 to "
                         f"{MAX_NGRAM_DRAFT_TOKENS} (3 is a common start)")
    return int(text)


def is_loopback(host: str) -> bool:
    """Whether only this machine reaches ``host``; the wildcards 0.0.0.0 and :: are not."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def client_url(host: str, port: int) -> str:
    """Where a client on this machine reaches a listener: never at the wildcard it binds."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


def engine_exposed(s) -> bool:
    """vLLM started here on an address other machines reach: HAProxy guards it."""
    return s.engine_url is None and s.node_role == "head" and not is_loopback(s.engine_host)


def app_exposed(s) -> bool:
    return s.node_role == "head" and not is_loopback(s.app_host)


def disagreements(s) -> list[str]:
    """Settings that are each valid but cannot go together, one sentence each."""
    found = []
    if s.async_scheduling == "on" and s.speculative_ngram != "off":
        found.append(f"ERNIE_ASYNC_SCHEDULING=on and ERNIE_SPECULATIVE_NGRAM={s.speculative_ngram} "
                     "cannot go together: vLLM refuses async scheduling with n-gram speculation. "
                     "Set ERNIE_ASYNC_SCHEDULING=auto or off, or ERNIE_SPECULATIVE_NGRAM=off")
    if s.enforce_eager and s.cudagraph_mode not in ("auto", "NONE"):
        found.append(f"ERNIE_CUDAGRAPH_MODE={s.cudagraph_mode} asks for CUDA graphs, which "
                     "ERNIE_ENFORCE_EAGER=true turns off: unset one of them")
    if s.torch_compile == "off" and s.cudagraph_mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        found.append(f"ERNIE_CUDAGRAPH_MODE={s.cudagraph_mode} needs the compiled model's pieces, "
                     "which ERNIE_TORCH_COMPILE=off turns off (vLLM would capture no graph): use "
                     "FULL or FULL_DECODE_ONLY, or ERNIE_TORCH_COMPILE=auto")
    if s.chat_db is not None and s.users is None:
        found.append("ERNIE_CHAT_DB turns on saved chats, which need a login: set "
                     "ERNIE_USERS=name:password (comma-separated for several)")
    if app_exposed(s) and s.users is None and not s.open_chat:
        found.append(f"ERNIE_APP_HOST={s.app_host} lets other machines reach the chat, which has "
                     "no login: set ERNIE_USERS=name:password (comma-separated for several; "
                     "`ernie-chat hash-password` makes the hashes), or ERNIE_OPEN_CHAT=true to let "
                     "anyone who reaches the port chat, or ERNIE_APP_HOST=127.0.0.1")
    return found + data_parallel_disagreements(s)


def data_parallel_disagreements(s) -> list[str]:
    local = s.data_parallel_size_local
    if local is not None and local > s.data_parallel_size:
        return [f"ERNIE_DATA_PARALLEL_SIZE_LOCAL={local} is more than ERNIE_DATA_PARALLEL_SIZE="
                f"{s.data_parallel_size}: the local copies are part of all copies"]
    spans_machines = local is not None and local < s.data_parallel_size
    if spans_machines and not s.data_parallel_address:
        return ["copies on several machines (ERNIE_DATA_PARALLEL_SIZE_LOCAL < "
                "ERNIE_DATA_PARALLEL_SIZE) need ERNIE_DATA_PARALLEL_ADDRESS: the head's address, "
                "reachable from the other machines"]
    if s.node_role == "engines" and (not spans_machines or s.data_parallel_start_rank is None):
        return ["ERNIE_NODE_ROLE=engines runs copies for a head elsewhere: set "
                "ERNIE_DATA_PARALLEL_SIZE (all copies), ERNIE_DATA_PARALLEL_SIZE_LOCAL (this "
                "machine's), ERNIE_DATA_PARALLEL_START_RANK and ERNIE_DATA_PARALLEL_ADDRESS (the head)"]
    return []
