"""The model a chat talks to: with ERNIE_MODELS, one Chainlit chat profile per served model.

Each served model (``Settings.served_models``) has an :class:`Engine`, made once per process:
the settings as that model's engine is reached (its URL, served name and window), one OpenAI
client, one shared answer to what the server is (``app.engine.single_flight``) and the speeds of
its last replies here.  With one model (no ERNIE_MODELS) the one engine is ERNIE_MODEL's at
the engine settings, the settings unchanged, and the chat profiles stay the personas
(``app.conversation.personas.profiles`` makes either).

A chat's model is its chat profile, whose name is the model's served name: Chainlit keeps it
in the session (``cl.user_session.get("chat_profile")``) and in a saved chat's metadata, and a
resumed chat gets it back from there (``app.kept.saved_chats.thread_profile``; docs/notes.md,
"Chainlit 2.12").  The name comes from
the browser (the socket's ``chatProfile``): :meth:`Engines.pick` only ever looks it up among
the served models, so a forged one reaches no URL and no file.

With ERNIE_MODELS some models may start only when asked for (ERNIE_MODELS_AT_ONCE,
server/stack/on_demand.py): :meth:`Engine.wake` marks the chat's model used, which starts an
asleep one, and says that it loads; each model's state is a file of its own
(server/engine_state.py, ``Engine.key``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Callable, Optional

import chainlit as cl
from openai import AsyncOpenAI

from app.engine.busy import BusyGauge
from app.engine.server_info import ServerInfo
from app.engine.single_flight import SingleFlight
from app.texts import text
from server.engine_state import read_state
from server.model_wake import mark_used
from server.settings import Settings
from server.settings.model_list import ServedModel

# The replies whose speed a model's profile shows (their median): recent, few enough to move.
RECENT_SPEEDS = 20
# What the engine is: asked once for the chats that open within 30 s, again after any error.
SERVER_MAX_AGE_S = 30.0


@dataclass
class Engine:
    """One served model as this process talks to it."""

    settings: Settings  # as its engine is reached: engine_base_url, served_model_name, max_model_len
    client: AsyncOpenAI
    busy: Optional[BusyGauge] = None
    server: SingleFlight[ServerInfo] = field(default_factory=lambda: SingleFlight(max_age_s=SERVER_MAX_AGE_S))
    speeds: deque = field(default_factory=lambda: deque(maxlen=RECENT_SPEEDS))
    key: Optional[str] = None  # its served name with ERNIE_MODELS: its state and use files

    @property
    def name(self) -> str:
        return self.settings.served_model_name

    @property
    def url(self) -> str:
        return self.settings.engine_base_url

    def finished(self, tokens_per_s: Optional[float]) -> None:
        """A reply this process streamed from the model ended, at this speed (None: unknown);
        the model was used now, for the supervisor's least recently used."""
        if tokens_per_s:
            self.speeds.append(tokens_per_s)
        self.used()

    def used(self) -> None:
        if self.key:
            mark_used(self.settings, self.key)

    def state(self) -> dict:
        """What the supervisor says its engine does (server/engine_state.py)."""
        return read_state(self.settings, self.key)

    def asleep(self) -> bool:
        return bool(self.key) and self.state().get("state") == "asleep"

    def wake(self, lang: str) -> Optional[str]:
        """Before a request: mark the model used (an asleep one starts) and, when it is not
        loaded, the notice that it loads and how long that took last time."""
        self.used()
        state = self.state() if self.key else {}
        if state.get("state") not in ("asleep", "starting"):
            return None
        took = state.get("load_s")
        return text(lang, "model_loading", model=self.name,
                    took=text(lang, "model_load_took", seconds=took) if took else text(lang, "model_load_first"))

    def error_text(self, lang: str, kind: str, exc: BaseException) -> str:
        """The chat's text for an error ``kind`` (app.engine.engine_client.error_kind) of this engine."""
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        return text(lang, kind, url=self.url, seconds=self.settings.request_timeout_s, model=self.name,
                    detail=detail[:300], wait=self.settings.continue_wait_s)

    def describe(self, lang: str) -> str:
        """The model's profile text: its window and recent speed."""
        speed = (text(lang, "model_speed", tps=f"{median(self.speeds):.1f}") if self.speeds
                 else text(lang, "model_no_replies"))
        return text(lang, "model_profile", window=f"{self.settings.max_model_len:,}", speed=speed)


def model_settings(settings: Settings, model: ServedModel) -> Settings:
    """The settings as ``model``'s engine is reached; the settings themselves for ERNIE_MODEL."""
    return settings.serving(model) if settings.models else settings


class Engines:
    """Every served model's engine, in ERNIE_MODELS' order (the first is the default)."""

    def __init__(self, settings: Settings, make_client: Callable[[Settings], AsyncOpenAI],
                 make_busy: Callable[[Settings], Optional[BusyGauge]]) -> None:
        views = [model_settings(settings, model) for model in settings.served_models]
        self.all = tuple(Engine(view, make_client(view), make_busy(view),
                                key=view.served_model_name if settings.models else None)
                         for view in views)

    @property
    def several(self) -> bool:
        return len(self.all) > 1

    def pick(self, profile: Optional[str]) -> tuple[Engine, bool]:
        """The engine of the chat profile ``profile``, and whether it names a served model
        (always True with one model, whose profiles are the personas); else the first."""
        found = next((engine for engine in self.all if engine.name == profile), None)
        return found or self.all[0], found is not None or not self.several

    def current(self) -> Engine:
        """The engine of this chat's model (its chat profile's)."""
        return self.pick(cl.user_session.get("chat_profile"))[0]

    def settle(self, lang: str) -> Optional[str]:
        """For a chat whose profile names no served model (forged, or a persona of a chat saved
        before ERNIE_MODELS): the notice that it goes on with the first model, which it then has."""
        if self.pick(cl.user_session.get("chat_profile"))[1]:
            return None
        first = self.all[0].name
        cl.context.session.chat_profile = first  # what a saved chat's metadata keeps
        cl.user_session.set("chat_profile", first)
        return text(lang, "model_unknown", model=first)

    async def close(self) -> None:
        for engine in self.all:
            await engine.client.close()


async def already_told() -> None:
    """A wait's notice when the chat said before that the model loads (:meth:`Engine.wake`)."""
