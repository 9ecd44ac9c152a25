"""The personas file (ERNIE_PERSONAS_FILE, server/personas_file.py): what it gives the chat,
and each mistake reported with the file and its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.conversation.personas import BUILT_IN, offered
from server.paths import ROOT
from server.personas_file import PersonasFileError, key_lines, load, parse
from server.settings import load_settings
from tests.support.settings import error_for

TWO = ROOT / "tests" / "data" / "personas-two.toml"


def test_the_built_in_file_holds_the_three_personas_with_starters_in_both_languages():
    personas = load(BUILT_IN)
    assert [p.name for p in personas] == ["Assistant", "Translator", "Tutor"]
    assert personas[0].system_prompt is None  # the operator's ERNIE_SYSTEM_PROMPT
    assert all(p.system_prompt for p in personas[1:])
    for persona in personas:
        assert persona.languages == ("en", "zh")
        assert persona.starters_in("en") and persona.starters_in("zh")
        assert not {s.label for s in persona.starters_in("en")} & {s.label for s in persona.starters_in("zh")}


def test_the_docs_example_is_a_valid_file():
    assert [p.name for p in load(ROOT / "docs" / "personas.example.toml")] == [
        "Presenter", "讲解员", "Translator", "Assistant"]


def test_each_persona_shows_in_its_languages_and_a_language_none_names_gets_all():
    personas = parse('[[personas]]\nname = "En"\nlanguages = ["en-US"]\n\n'
                     '[[personas]]\nname = "Zh"\nlanguages = ["zh-CN", "zh"]\n', "p.toml")
    assert personas[1].languages == ("zh",)
    assert [p.name for p in offered("en", personas)] == ["En"]
    assert [p.name for p in offered("zh", personas)] == ["Zh"]
    only_en = personas[:1]
    assert offered("zh", only_en) == only_en


def test_a_starter_without_a_language_shows_in_every_language_of_its_persona():
    pirate, poet = load(TWO)
    assert [s.label for s in pirate.starters_in("en")] == ["Treasure"]
    assert pirate.starters_in("zh") == []
    assert poet.starters == () and poet.languages == ("en", "zh")


BAD = [
    pytest.param('[[personas]]\nname = "A"\nsystem_prompt = \n',
                 "p.toml, line 3, column 17: not valid TOML: Invalid value", id="toml-syntax"),
    pytest.param('[[personas]]\nname = "A"\n\n[[personas]]\ndescription = "no name"\n',
                 "p.toml, line 4: persona 2: no 'name'", id="missing-name"),
    pytest.param('[[personas]]\nname = "A"\n\n[[personas]]\nname = " A "\n',
                 "p.toml, line 5: persona 'A': the name of persona 1 too", id="duplicate-name"),
    pytest.param('[[personas]]\nname = "A"\ncolour = "red"\n',
                 "p.toml, line 3: persona 'A': unknown key 'colour' (allowed: name, description, "
                 "system_prompt, languages, starters)", id="unknown-key"),
    pytest.param('[[personas]]\nname = "A"\n[[personas.starters]]\nlabel = "x"\nmesage = "y"\n',
                 "p.toml, line 5: persona 'A': starter 1: unknown key 'mesage'", id="unknown-starter-key"),
    pytest.param('title = "x"\n[[personas]]\nname = "A"\n',
                 "p.toml, line 1: unknown key 'title' (allowed: personas)", id="unknown-top-key"),
    pytest.param('[[personas]]\nname = "A"\nsystem_prompt = """\n   \n"""\n',
                 "p.toml, line 3: persona 'A': system_prompt is empty", id="empty-prompt"),
    pytest.param('[[personas]]\nname = 3\n', "p.toml, line 2: persona 1: name should be a string, not 3",
                 id="name-type"),
    pytest.param('[[personas]]\nname = "A"\nlanguages = "en"\n',
                 "p.toml, line 3: persona 'A': languages should be a list, not 'en'", id="languages-type"),
    pytest.param('[[personas]]\nname = "A"\nlanguages = ["en", "fr"]\n',
                 "p.toml, line 3: persona 'A': languages: 'fr' is not one of the chat's languages",
                 id="unknown-language"),
    pytest.param('[[personas]]\nname = "A"\nlanguages = []\n', "p.toml, line 3: persona 'A': languages is empty",
                 id="no-language"),
    pytest.param('[[personas]]\nname = "A"\nlanguages = ["en"]\n\n[[personas.starters]]\nlabel = "x"\n'
                 'message = "y"\nlanguage = "zh-CN"\n',
                 "p.toml, line 8: persona 'A': starter 'x' is in 'zh', not one of the persona's "
                 "languages (en)", id="starter-language"),
    pytest.param('[[personas]]\nname = "A"\n\n[[personas.starters]]\nlabel = "x"\nmessage = "y"\n\n'
                 '[[personas.starters]]\nlabel = "z"\nmessage = ""\n',
                 "p.toml, line 10: persona 'A': starter 2: message is empty", id="empty-starter"),
    pytest.param('[[personas]]\nname = "A"\nstarters = ["hi"]\n',
                 "p.toml, line 3: persona 'A': starters should be a table, not 'hi'", id="starter-type"),
    pytest.param('personas = [{name = "A", foo = 1}]\n', "p.toml, line 1: persona 'A': unknown key 'foo'",
                 id="inline-table"),
    pytest.param("# nothing yet\n", "p.toml, line 1: no personas: the file needs at least one [[personas]] table",
                 id="no-personas"),
]


@pytest.mark.parametrize("text, expected", BAD)
def test_each_mistake_names_the_file_and_its_line(text, expected):
    with pytest.raises(PersonasFileError) as info:
        parse(text, "p.toml")
    assert expected in str(info.value)


def test_every_mistake_of_a_file_is_reported_each_on_its_line():
    with pytest.raises(PersonasFileError) as info:
        parse('[[personas]]\nname = ""\n\n[[personas]]\nname = "B"\nsystem_prompt = 5\n', "p.toml")
    assert str(info.value).splitlines() == ["p.toml, line 2: persona 1: name is empty",
                                            "p.toml, line 6: persona 'B': system_prompt should be a string, not 5"]


def test_a_header_inside_a_multi_line_string_is_not_a_table():
    text = '[[personas]]\nname = "A"\nsystem_prompt = """\n[[personas]]\nname = x\n"""\nfoo = 1\n'
    assert key_lines(text)[("personas", 0, "foo")] == 7
    assert ("personas", 1) not in key_lines(text)


def test_a_bad_file_stops_the_settings_naming_the_variable_the_file_and_the_line(monkeypatch, tmp_path):
    path = tmp_path / "personas.toml"
    path.write_text('[[personas]]\nname = "A"\n\n[[personas]]\nname = "A"\n', encoding="utf-8")
    message = error_for(monkeypatch, "ERNIE_PERSONAS_FILE", str(path))
    assert "ERNIE_PERSONAS_FILE=" in message
    assert f"{path}, line 5: persona 'A': the name of persona 1 too" in message


@pytest.mark.parametrize("content", [None, b"\xff\xfe not utf-8"])
def test_a_missing_or_unreadable_file_stops_the_settings(monkeypatch, tmp_path, content):
    path = tmp_path / "personas.toml"
    if content is not None:
        path.write_bytes(content)
    message = error_for(monkeypatch, "ERNIE_PERSONAS_FILE", str(path))
    assert f"{path}: cannot be read as a UTF-8 text file" in message


def test_a_good_file_is_taken(monkeypatch):
    monkeypatch.setenv("ERNIE_PERSONAS_FILE", str(TWO))
    assert load_settings().personas_file == Path(TWO)
