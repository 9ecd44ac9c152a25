"""Where this worker keeps each chat for another worker to carry on (app/conversation/in_flight.py):
a saved chat's steps (ERNIE_CHAT_DB), or without a database the chat's files
(app/kept/chat_files.py), which every worker of the box sees."""

from __future__ import annotations

import chainlit as cl

from app.conversation.in_flight import ReplyStore
from app.kept import chat_files, saved_chats
from app.worker import SETTINGS

SAVED_STEPS = saved_chats.SavedSteps()
CHAT_FILES = None if SETTINGS.chat_db else chat_files.ChatFolder(SETTINGS.live_chats_dir).open()


def this_chat_files() -> chat_files.ChatFiles:
    """This chat's files (without saved chats): by its session id, for its user."""
    user = cl.context.session.user
    return CHAT_FILES.chat(cl.context.session.id, user.identifier if user else None)


def reply_store() -> ReplyStore:
    return SAVED_STEPS if CHAT_FILES is None else this_chat_files()


def remember() -> None:
    """Keep the chat's history and settings where another worker of the box finds them if this
    one dies."""
    reply_store().keep(cl.user_session.get("conversation"), cl.user_session.get("params"))
