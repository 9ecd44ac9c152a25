"""The bad-input catalogue: each case gets a clear error (what, and what to do) and loses nothing.

Settings and files are checked through the same functions `up` uses; chat messages go
through the app's own websocket to a real app and engine (tests/conftest.py).
"""

from __future__ import annotations

import sqlite3

import pytest

from app.engine.engine_client import error_kind
from server import chat_db
from server.plan import preflight
from server.plan.device import DeviceMemory
from server.plan.model_config import load_shape
from server.settings import SettingsError, load_settings
from server.stack.model_source import choose_model
from server.stack.processes import free_port
from server.usage_log import append_usage, read_usage

# --- settings: each names the variable, the value and what is allowed -------------------

SETTING_CASES = {
    "utilization 0": ({"ERNIE_GPU_MEMORY_UTILIZATION": "0"}, "greater than 0 and at most 1"),
    "utilization 1.5": ({"ERNIE_GPU_MEMORY_UTILIZATION": "1.5"}, "greater than 0 and at most 1"),
    "negative max-model-len": ({"ERNIE_MAX_MODEL_LEN": "-4096"}, "greater than 0"),
    "unknown dtype": ({"ERNIE_DTYPE": "float8"}, "'auto', 'bfloat16', 'float16' or 'float32'"),
    "port out of range": ({"ERNIE_ENGINE_PORT": "70000"}, "less than or equal to 65535"),
    "engine URL without scheme": ({"ERNIE_ENGINE_URL": "gpu-box:8000"}, "must start with http://"),
    "unbalanced quotes in engine args": ({"ERNIE_EXTRA_ENGINE_ARGS": "--x 'a"}, "shell quoting"),
    "saved chats without users": ({"ERNIE_CHAT_DB": "chats.db"}, "need a login"),
    "user without password": ({"ERNIE_USERS": "alice:s3cr3t,bob"}, "user:password pairs"),
}


@pytest.mark.parametrize("case", list(SETTING_CASES))
def test_invalid_setting_is_named_with_the_fix(case, monkeypatch, tmp_path):
    env, allowed = SETTING_CASES[case]
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert next(iter(env)) in message or "ERNIE_CHAT_DB" in message
    assert allowed in message, message
    assert "s3cr3t" not in message, "a password was echoed"


def test_malformed_env_file_lines_are_listed(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("# notes are fine\nERNIE_MAX_MODEL_LEN=4096\n"
                                   "ERNIE_APP_PORT 8081\n=oops\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "line 3: 'ERNIE_APP_PORT 8081' is not KEY=VALUE" in str(info.value)
    assert "line 4" in str(info.value) and "line 2" not in str(info.value)
    assert (tmp_path / ".env").read_text().count("\n") == 4, "the file must stay as it was"


def test_max_model_len_above_the_models_limit_is_refused_before_start():
    shape, _ = load_shape("baidu/ERNIE-4.5-0.3B-PT")
    total = 24 * 1024**3
    problems = preflight.check(load_settings(max_model_len=200_000), shape,
                               DeviceMemory("cuda", "GPU", total, total))
    assert any("ERNIE_MAX_MODEL_LEN=131072 or less" in p.message for p in problems)


def test_missing_model_path_is_refused_with_the_fix():
    with pytest.raises(FileNotFoundError) as info:
        choose_model(load_settings(model="./models/ernie-missing"))
    assert "is not a folder" in str(info.value) and "config.json" in str(info.value)


async def test_unreachable_engine_url_is_classified():
    from app.engine.engine_client import make_client
    client = make_client(load_settings(engine_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(Exception) as info:
        await client.models.list()
    assert error_kind(info.value) == "unreachable"


def test_corrupt_usage_log_keeps_every_readable_record(tmp_path):
    log = tmp_path / "usage.jsonl"
    append_usage(log, 100, 20)
    with open(log, "ab") as handle:
        handle.write(b'{"prompt_tokens": 5, "completion_tok\n\xff\xfe garbage\n')
    append_usage(log, 300, 40)
    records, skipped = read_usage(log)
    assert [r["prompt_tokens"] for r in records] == [100, 300] and skipped == 2


def test_corrupt_chat_database_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "chats.db"
    db.write_bytes(b"this is not sqlite" * 100)
    before = db.read_bytes()
    with pytest.raises(chat_db.ChatDbError) as info:
        chat_db.prepare_db(db)
    assert "not a usable SQLite database" in str(info.value) and "move it away" in str(info.value)
    assert db.read_bytes() == before


def test_chat_database_is_created_with_the_columns_chainlit_writes(tmp_path):
    db = tmp_path / "new" / "chats.db"
    chat_db.prepare_db(db)
    with sqlite3.connect(db) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(steps)")}
    assert {"autoCollapse", "defaultOpen", "command", "modes", "icon"} <= columns
