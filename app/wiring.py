"""What the chat's handlers (app/chat.py) stand on, set up once as a worker imports them: the
app's own routes and the middlewares around Chainlit's server, the chats' files, the login,
and the saved chats with their search and shared links."""

from __future__ import annotations

import chainlit as cl
from chainlit.config import config as chainlit_config
from chainlit.data import get_data_layer

from app import chat_records
from app.auth import auth_sessions, login, oidc
from app.auth.user_limits import user_key
from app.conversation import in_flight
from app.conversation.answer import MAX_UPLOAD_BYTES
from app.kept import (admitted_steps, chat_files, chat_search, drain, saved_chats, saved_prompts,
                      search_index, stores)
from app.pages import admin_page, live_page, share_page
from app.web import (boot_cookie, closed_routes, files_dir, origins, page_policy, served_files, session_guard,
                     upload_caps, upload_check, upload_limit)
from app.worker import ENGINES, SETTINGS
from server import chat_db

# The drain's and the admin's GET routes first: the live page's install moves Chainlit's
# catch-all GET route behind every route added until then.
drain.install()
admin_page.install(SETTINGS)
live_page.install(ENGINES.all, SETTINGS.api_key_value, SETTINGS.public_url)
files_dir.install()
session_guard.install()
upload_check.install(upload_caps.Caps.from_settings(SETTINGS), user_key)
closed_routes.install()
upload_limit.install(MAX_UPLOAD_BYTES)
served_files.install()
page_policy.install()
origins.install(SETTINGS.allowed_origins)
boot_cookie.install()
in_flight.install()
if stores.CHAT_FILES is not None:
    # The files of chats whose worker died and that never came back.
    stores.CHAT_FILES.sweep(chainlit_config.project.session_timeout)
    chat_files.install(stores.CHAT_FILES)

if SETTINGS.login_on:
    _SESSIONS = auth_sessions.start(SETTINGS)
    if SETTINGS.users is not None:
        login.install(SETTINGS, _SESSIONS)
    if SETTINGS.oidc_issuer is not None:
        oidc.install(SETTINGS, _SESSIONS)

if SETTINGS.chat_db is not None:
    chat_db.prepare_db(SETTINGS.chat_db)
    search_index.build(str(SETTINGS.chat_db))  # a database from before the index: once, at its first start
    cl.data_layer(lambda: saved_chats.data_layer(SETTINGS.chat_db, chat_search.SearchingLayer))
    chat_records.start(lambda: get_data_layer().engine)  # usage and audit rows: the same database
    chat_search.install()
    admitted_steps.install()  # a message is saved, and makes its chat, once admitted
    saved_prompts.install()  # the star on a message and in the composer
    share_page.install(SETTINGS.public_url,
                       lambda thread: ENGINES.pick(saved_chats.thread_profile(thread))[0].name,
                       SETTINGS.shared_requests_per_min)
