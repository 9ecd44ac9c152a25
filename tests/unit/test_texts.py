"""app/texts/: both languages say the same things with the same placeholders."""

from __future__ import annotations

import string

import pytest

from app.engine.engine_client import ReplyStats
from app.texts import TEXTS, figures_line, lang_of, text


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def sample_values(template: str) -> dict:
    return {name: 1.5 if name in ("seconds", "wait") else f"<{name}>" for name in placeholders(template)}


def test_both_languages_have_the_same_keys():
    assert set(TEXTS) == {"en", "zh"}
    assert set(TEXTS["en"]) == set(TEXTS["zh"])


@pytest.mark.parametrize("key", sorted(TEXTS["en"]))
def test_both_languages_use_the_same_placeholders(key):
    assert placeholders(TEXTS["en"][key]) == placeholders(TEXTS["zh"][key])


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("key", sorted(TEXTS["en"]))
def test_every_text_formats_with_its_values(lang, key):
    values = sample_values(TEXTS[lang][key])
    rendered = text(lang, key, **values)
    for name, value in values.items():
        if isinstance(value, str):
            assert value in rendered
    assert "{" not in rendered


@pytest.mark.parametrize("locale, lang", [
    ("zh-CN", "zh"), ("zh-TW", "zh"), ("zh", "zh"), ("ZH-cn", "zh"),
    ("en-US", "en"), ("fr-FR", "en"), ("", "en"), (None, "en"),
])
def test_lang_of(locale, lang):
    assert lang_of(locale) == lang


def finished_stats() -> ReplyStats:
    # 250 ms to the first token, then 10 more tokens in 1 s.
    return ReplyStats(started=10.0, first_token_at=10.25, finished_at=11.25,
                      prompt_tokens=20, completion_tokens=11)


def test_figures_line_in_english():
    assert figures_line("en", finished_stats()) == (
        "250 ms to first token · 10.0 tok/s · 20 prompt + 11 reply tokens")


def test_figures_line_in_chinese():
    assert figures_line("zh", finished_stats()) == "首字 250 ms · 10.0 tok/s · 提示 20 + 回复 11 个 token"


def test_figures_line_without_figures_shows_dashes():
    line = figures_line("en", ReplyStats(started=10.0))
    assert line == "– to first token · – tok/s · – prompt + – reply tokens"


def test_figures_line_says_when_the_reply_was_continued_after_its_engine_stopped():
    stats = finished_stats()
    stats.continued = 1
    assert figures_line("en", stats, seed=42).endswith(
        "11 reply tokens · seed 42 · ↻ continued after its engine stopped")
    assert figures_line("zh", stats).endswith("个 token · ↻ 原引擎中断后已接着生成")
    assert "↻" not in figures_line("en", finished_stats())


def test_figures_line_shows_the_seed_when_one_is_set():
    assert figures_line("en", finished_stats(), seed=42).endswith("11 reply tokens · seed 42")
    assert figures_line("zh", finished_stats(), seed=7).endswith("· 种子 7")
