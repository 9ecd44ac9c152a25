"""app/conversation/chat_settings.py: the seed a QA tester types in the settings panel, and a saved chat's
settings restored."""

from __future__ import annotations

import pytest

from app.conversation.chat_settings import (MAX_SEED, BadSeed, ChatParams, apply, panel, parse_seed, restored,
                                            sampling_extra)
from app.conversation.personas import PERSONAS

PARAMS = ChatParams("sys", 0.7, 0.9, 256)


@pytest.mark.parametrize("typed, seed", [("", None), ("  ", None), (None, None), ("0", 0),
                                         (" 42 ", 42), (str(MAX_SEED), MAX_SEED)])
def test_seed_is_empty_or_a_whole_number(typed, seed):
    assert parse_seed(typed) == seed


@pytest.mark.parametrize("typed", ["-1", "4.5", "abc", "1e3", str(MAX_SEED + 1)])
def test_a_bad_seed_is_refused_with_what_was_typed(typed):
    with pytest.raises(BadSeed) as info:
        apply({"seed": typed, "temperature": 1.0}, PARAMS, 1000)
    assert info.value.value == typed


def test_apply_sets_and_clears_the_seed():
    seeded = apply({"seed": "7"}, PARAMS, 1000)
    assert seeded.seed == 7 and seeded.temperature == 0.7
    assert apply({"temperature": 1.2}, seeded, 1000).seed == 7  # not in the update: kept
    assert apply({"seed": ""}, seeded, 1000).seed is None


def test_the_request_carries_the_seed_and_ignore_eos():
    assert sampling_extra(PARAMS, ignore_eos=False) is None
    assert sampling_extra(ChatParams("", 0.7, 0.9, 256, seed=3), ignore_eos=True) == {
        "seed": 3, "ignore_eos": True}


def test_a_saved_chat_gets_back_its_panel_values():
    saved = {"system_prompt": "Be brief.", "temperature": 1.3, "top_p": 0.5, "max_tokens": 512, "seed": "7"}
    assert restored(saved, PARAMS, 1024) == ChatParams("Be brief.", 1.3, 0.5, 512, 7)


@pytest.mark.parametrize("saved", [{"seed": "abc"}, {"temperature": "warm"}, {"max_tokens": None}])
def test_saved_values_that_no_longer_apply_leave_the_defaults(saved):
    assert restored(saved, PARAMS, 1024) == PARAMS


# --- the personas in the panel, with several models (the profiles pick the model) ----------

OPERATOR = "You are a helpful assistant."
TUTOR = next(p for p in PERSONAS if p.name == "Tutor")


def test_the_panel_offers_the_personas_only_when_the_profiles_are_models():
    assert [w.id for w in panel(PARAMS, 1000, "en").inputs][0] == "system_prompt"
    with_models = panel(ChatParams(TUTOR.system_prompt, 0.7, 0.9, 256), 1000, "en", OPERATOR).inputs
    assert with_models[0].id == "persona"
    assert with_models[0].initial == "Tutor"
    assert with_models[0].values == [p.name for p in PERSONAS]


def test_choosing_a_persona_sets_its_prompt_and_typing_keeps_what_was_typed():
    plain = ChatParams(OPERATOR, 0.7, 0.9, 256)
    # The browser sends every value on each change: the persona changed, the old prompt with it.
    tutor = apply({"persona": "Tutor", "system_prompt": OPERATOR}, plain, 1000, OPERATOR)
    assert tutor.system_prompt == TUTOR.system_prompt
    back = apply({"persona": "Assistant", "system_prompt": TUTOR.system_prompt}, tutor, 1000, OPERATOR)
    assert back.system_prompt == OPERATOR  # the first persona's prompt is the operator's
    typed = apply({"persona": "Tutor", "system_prompt": "Answer in rhymes."}, tutor, 1000, OPERATOR)
    assert typed.system_prompt == "Answer in rhymes."


def test_a_forged_persona_gets_the_first_and_a_saved_prompt_stays_as_edited():
    tutor = ChatParams(TUTOR.system_prompt, 0.7, 0.9, 256)
    assert apply({"persona": "../../etc/passwd"}, tutor, 1000, OPERATOR).system_prompt == OPERATOR
    saved = {"persona": "Tutor", "system_prompt": "Edited after choosing Tutor."}
    assert restored(saved, ChatParams(OPERATOR, 0.7, 0.9, 256), 1000).system_prompt == saved["system_prompt"]
