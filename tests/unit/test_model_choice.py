"""The model picker's pure parts (app/engine/model_choice.py): which engine a chat profile names, and
what each profile says.  The real picker, two real engines and a forged profile over the socket
are in tests/models/test_model_choice_stack.py."""

from __future__ import annotations

import pytest

from app.conversation.personas import PERSONAS, profiles
from app.engine.engine_client import ReplyStats
from app.engine.model_choice import RECENT_SPEEDS, model_settings
from app.kept.saved_chats import thread_profile
from app.pages.live_page import server_label
from app.texts import figures_line
from server.settings import load_settings
from tests.support.plans import engines

pytestmark = pytest.mark.usefixtures("clean_env")


def test_one_model_keeps_the_settings_and_the_personas_as_profiles():
    settings = load_settings()
    assert model_settings(settings, settings.served_models[0]) is settings
    one = engines()
    assert not one.several and one.all[0].settings.engine_base_url == settings.engine_base_url
    # Any profile (a persona) is this one model, never "unknown".
    assert one.pick("Translator") == (one.all[0], True) and one.pick(None) == (one.all[0], True)
    assert [p.name for p in profiles(one, "en")] == [p.name for p in PERSONAS]


def test_each_model_gets_its_port_name_and_window_and_only_a_served_name_picks_it():
    several = engines(models="/models/big:8192,org/small:2048", engine_port=9100)
    big, small = several.all
    assert (big.name, big.url, big.settings.max_model_len) == ("big", "http://127.0.0.1:9100", 8192)
    assert (small.name, small.url, small.settings.max_model_len) == ("small", "http://127.0.0.1:9101", 2048)
    assert big.client == "client 1" and small.client == "client 2"
    assert several.pick("small") == (small, True)
    for forged in (None, "", "Translator", "org/small", "http://evil:1", "small "):
        assert several.pick(forged) == (big, False), forged


def test_the_profiles_show_each_window_and_the_median_of_recent_speeds():
    several = engines(models="/models/big:8192,org/small:2048")
    big, small = several.all
    for speed in (10.0, 30.0, None, 20.0):
        small.finished(speed)  # None: a reply without a speed counts nothing
    shown = profiles(several, "en")
    assert [p.name for p in shown] == ["big", "small"] and shown[0].default and not shown[1].default
    assert shown[0].markdown_description == "Context window: 8,192 tokens. Recent speed: no replies yet."
    assert "2,048" in shown[1].markdown_description and "20.0 tokens/s" in shown[1].markdown_description
    assert "每秒 20.0 个 token" in profiles(several, "zh")[1].markdown_description
    for _ in range(RECENT_SPEEDS):
        small.finished(100.0)
    assert "100.0 tokens/s" in profiles(several, "en")[1].markdown_description


def test_the_figures_line_and_the_live_view_name_the_model_only_when_given():
    stats = ReplyStats(started=0.0, first_token_at=0.5, finished_at=1.5, prompt_tokens=3, completion_tokens=11)
    assert figures_line("en", stats, model="small") == "small · " + figures_line("en", stats)
    big, small = engines(models="/models/big:8192,org/small:2048", engine_port=9100).all
    assert server_label([big], several=False) == "http://127.0.0.1:9100"
    assert server_label([big, small], several=True) == "big (http://127.0.0.1:9100), small (http://127.0.0.1:9101)"
    assert server_label([small], several=True) == "small (http://127.0.0.1:9101)"


def test_a_saved_chat_names_its_model_from_its_metadata_else_the_first():
    several = engines(models="/models/big:8192,org/small:2048")
    assert several.pick(thread_profile({"metadata": {"chat_profile": "small"}}))[0].name == "small"
    assert several.pick(thread_profile({"metadata": '{"chat_profile": "small"}'}))[0].name == "small"  # SQLite's text
    for thread in ({"metadata": {"chat_profile": "evil"}}, {"metadata": {"chat_profile": ["small"]}},
                   {"metadata": None}, {"metadata": "{}"}, {}):
        assert several.pick(thread_profile(thread))[0].name == "big", thread
