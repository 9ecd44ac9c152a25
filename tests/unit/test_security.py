"""Security defaults of the supervisor: loopback by default, a key whenever vLLM is exposed,
files readable by their owner only."""

from __future__ import annotations

import stat

from server.env_file import write_env
from server.private_files import tighten
from server.settings import load_settings
from server.stack.engine_args import engine_command
from server.settings import is_loopback
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


def test_tune_writes_dot_env_for_its_owner_only_even_over_a_readable_one(tmp_path):
    env = tmp_path / ".env"
    env.write_text("ERNIE_USERS=alice:secret\n")
    env.chmod(0o644)
    write_env(env, {"ERNIE_MAX_NUM_SEQS": "64"})
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert "ERNIE_USERS=alice:secret" in env.read_text()
    fresh = tmp_path / "new.env"
    write_env(fresh, {"ERNIE_MAX_NUM_SEQS": "64"})
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_tightening_reaches_every_file_and_folder_but_not_through_links(tmp_path):
    files = tmp_path / ".files" / "worker-1" / "session"
    files.mkdir(parents=True, mode=0o755)
    (files / "upload.txt").write_text("x")
    (files / "upload.txt").chmod(0o644)
    outside = tmp_path / "not-ours.txt"
    outside.write_text("x")
    outside.chmod(0o644)
    (files / "link").symlink_to(outside)
    tighten(tmp_path / ".files", tmp_path / "missing.log")
    modes = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(p.stat().st_mode))
             for p in [tmp_path / ".files", files.parent, files, files / "upload.txt", outside]}
    assert modes == {".files": "0o700", ".files/worker-1": "0o700", ".files/worker-1/session": "0o700",
                     ".files/worker-1/session/upload.txt": "0o600", "not-ours.txt": "0o644"}
