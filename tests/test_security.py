"""Security defaults of the supervisor: loopback by default, a key whenever vLLM is exposed."""

from __future__ import annotations

import stat

from server.settings import load_settings
from server.stack.engine_args import engine_command
from server.settings_rules import is_loopback
from server.stack.supervisor import Stack


def test_defaults_listen_on_loopback_only():
    settings = load_settings()
    assert settings.engine_host == "127.0.0.1" and settings.app_host == "127.0.0.1"
    assert is_loopback(settings.engine_host)


def test_exposed_engine_without_key_gets_a_generated_one(tmp_path):
    said = []
    stack = Stack(load_settings(engine_host="0.0.0.0"), root=tmp_path, out=said.append)
    stack.secure_exposed_engine()
    key_file = tmp_path / ".cache" / "engine-api-key"
    key = key_file.read_text().strip()
    assert len(key) >= 32
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600, "the key file must be private"
    assert stack.settings.api_key_value == key
    # vLLM gets it through its environment, the app through ERNIE_API_KEY; never on argv.
    command = engine_command(stack.settings, "m", "cpu", "python")
    assert command.env["VLLM_API_KEY"] == key and key not in " ".join(command.argv)
    assert stack.settings.as_env()["ERNIE_API_KEY"] == key
    assert str(key_file) in said[0] and key not in said[0], "say where the key is, not the key"
    # A second start reuses the same key: clients keep working.
    again = Stack(load_settings(engine_host="0.0.0.0"), root=tmp_path, out=said.append)
    again.secure_exposed_engine()
    assert again.settings.api_key_value == key


def test_loopback_or_keyed_engine_is_left_alone(tmp_path):
    for settings in (load_settings(), load_settings(engine_host="0.0.0.0", api_key="given")):
        stack = Stack(settings, root=tmp_path, out=lambda _: None)
        stack.secure_exposed_engine()
        assert stack.settings is settings
    assert not (tmp_path / ".cache" / "engine-api-key").exists()

