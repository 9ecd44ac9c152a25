"""The chat app: where it listens, its defaults, saved chats, files, and its engine connection."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from server import personas_file
from server.chat_db import POSTGRES_SCHEMES
from server.settings.network import client_url

# A chat's next message comes after its reader's pause (capacity's users think 5 s on
# average): a connection kept that long spares the app and the engine a new one per message.
OWN_ENGINE_KEEPALIVE_S = 60.0
# vLLM's own limit is 5 s; letting go at 2 s kept the app's requests off a closing
# connection (docs/notes.md, "Keep-alive race").
OTHER_ENGINE_KEEPALIVE_S = 2.0
KEEPALIVE_MARGIN_S = 15.0
# Pieces of 16 tokens still come faster than a chat shows them at a GPU's crowd speed.
STREAM_INTERVAL_MAX = 16


def checked_chat_db(value) -> Optional[str]:
    if value in (None, ""):
        return None
    text = str(value)
    if "://" in text and not text.startswith(POSTGRES_SCHEMES):
        raise ValueError("must be a SQLite file path (data/chats.db) or a PostgreSQL URL "
                         "(postgresql://user:password@host:5432/dbname)")
    return text


def checked_personas_file(path: Optional[Path]) -> Optional[Path]:
    """A file whose personas the chat can show; its problems, one a line, each naming its line."""
    if path is not None:
        try:
            personas_file.load(path)
        except personas_file.PersonasFileError as exc:
            raise ValueError(str(exc).replace("\n", "\n    ")) from None
    return path


class ChatSettings(BaseModel):
    app_host: str = Field("127.0.0.1", description="Address the Chainlit app listens on.")
    app_port: int = Field(8080, ge=1, le=65535, description="Port the Chainlit app listens on.")
    system_prompt: str = Field(
        "You are a helpful assistant.", description="Default system prompt of new chats."
    )
    personas_file: Annotated[Optional[Path], AfterValidator(checked_personas_file)] = Field(
        None, description="The personas of the chat's menu, from a TOML file: each with its name, "
        "system prompt, starter prompts and languages (docs/chat.md, \"Personas file\"; an example: "
        "docs/personas.example.toml). Unset: the built-in Assistant, Translator and Tutor.",
    )
    temperature: float = Field(0.7, ge=0, le=2, description="Default sampling temperature.")
    top_p: float = Field(0.9, gt=0, le=1, description="Default nucleus sampling top_p.")
    max_tokens: int = Field(512, ge=1, description="Default longest reply, in tokens.")
    chat_db: Annotated[Optional[str], BeforeValidator(checked_chat_db)] = Field(
        None,
        description="Saved chats: a SQLite file (data/chats.db), or a PostgreSQL URL "
        "(postgresql://user:password@host:5432/chats) that several app workers or machines "
        "share. Turns on login and the chat history sidebar; needs ERNIE_USERS.",
    )
    context_window: Optional[int] = Field(
        None, gt=0, description="Context window (tokens) of an OpenAI-compatible server that does "
        "not report one (vLLM and llama.cpp do); unset: ERNIE_MAX_MODEL_LEN.",
    )
    usage_log: Path = Field(
        Path("data/usage.jsonl"),
        description="Token counts of each chat request and the kind of each error the chat "
        "showed (with the login name, never text), for `ernie-chat plan --from-usage` and the "
        "admin page.",
    )
    live_chats_dir: Path = Field(
        Path("data/live-chats"),
        description="Without saved chats: a private folder where each chat's history and reply in "
        "flight are kept while it lives, so that another app worker of this machine carries the "
        "chat on if its own dies.",
    )
    ignore_eos: bool = Field(
        False, description="QA and demos: replies always run to the max tokens (vLLM's ignore_eos)."
    )
    stream_interval_max: Optional[int] = Field(
        None, ge=1, description="When many chats stream at once, the app lets vLLM send up to this "
        "many tokens per streamed piece (its per-request stream_interval; never the first token), "
        "sized so pieces still arrive faster than the chat shows them; 1 turns it off (servers "
        "that reject the field). Unset: 16, or 1 where `up` has its vLLM group every request's "
        "tokens itself (a GPU's vLLM older than 0.32).",
    )
    request_timeout_s: float = Field(
        60, gt=0, description="Seconds without a new token before the app gives up on a reply."
    )
    continue_wait_s: float = Field(
        180, ge=0, le=3600, description="Seconds a reply whose engine stopped (killed, crashed, "
        "restarted) waits for an engine to go on with it: another engine copy takes it at once; "
        "with one copy the chat says the engine is restarting and the reply goes on when the "
        "supervisor has it back (a CPU vLLM takes 60-100 s). After this the chat shows the "
        "error, the text so far kept; 0 shows it at once.",
    )
    engine_keepalive_s: Optional[float] = Field(
        None, gt=0, le=3600, description="Seconds the app keeps an idle connection to the engine "
        "for the next message. It must stay under the engine's own limit (vLLM closes an idle "
        "connection after 5 s unless VLLM_HTTP_TIMEOUT_KEEP_ALIVE says otherwise). Unset: 60 for "
        "the engine `up` starts, whose limit it sets 15 s higher, and 2 for one elsewhere "
        "(ERNIE_ENGINE_URL).",
    )
    pdf_max_pages: int = Field(300, ge=1, description="An attached PDF with more pages is refused unread.")
    pdf_memory_mb: int = Field(512, ge=128, description="Memory (MiB) of the child process that reads "
                               "an attached PDF; a PDF that needs more is refused.")
    pdf_timeout_s: float = Field(20, gt=0, description="Seconds the child process may take to read an "
                                 "attached PDF; a slower one is stopped and refused.")

    def problems(self) -> list[str]:
        return []

    @property
    def app_url(self) -> str:
        return client_url(self.app_host, self.app_port, self.chat_tls)

    @property
    def interval_max(self) -> int:
        """ERNIE_STREAM_INTERVAL_MAX, or its default where nothing chose (`up` chooses 1 for
        the workers of a vLLM that groups tokens itself: server/stack/app_tier.py)."""
        return self.stream_interval_max or STREAM_INTERVAL_MAX

    @property
    def app_keepalive_s(self) -> float:
        """engine_keepalive_s, or its default: an engine elsewhere may keep vLLM's 5 s."""
        if self.engine_keepalive_s is not None:
            return self.engine_keepalive_s
        return OWN_ENGINE_KEEPALIVE_S if self.starts_engine else OTHER_ENGINE_KEEPALIVE_S

    @property
    def engine_keepalive_limit_s(self) -> int:
        """VLLM_HTTP_TIMEOUT_KEEP_ALIVE for the engine ``up`` starts: the app lets an idle
        connection go well before the engine would close it, never racing its close."""
        return math.ceil(self.app_keepalive_s + KEEPALIVE_MARGIN_S)
