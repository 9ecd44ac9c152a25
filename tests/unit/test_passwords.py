"""Hashed login passwords: server/passwords.py, the ERNIE_USERS check, `ernie-chat hash-password`."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from server import passwords
from server.settings import SettingsError, load_settings
from server.paths import ROOT

FAST = 4  # bcrypt's fewest rounds: the same code path, 1 ms instead of 300


def test_a_hash_matches_its_password_only():
    hashed = passwords.hash_password("correct horse", rounds=FAST)
    assert passwords.is_hash(hashed) and "correct horse" not in hashed
    assert passwords.matches(hashed, "correct horse")
    assert not passwords.matches(hashed, "correct horsE")
    assert not passwords.matches(hashed, "x" * 100), "an over-long guess is a plain mismatch"
    # The list format name:secret,name:secret must survive any hash.
    assert "," not in hashed and ":" not in hashed


def test_each_hash_has_its_own_salt():
    assert passwords.hash_password("same", rounds=FAST) != passwords.hash_password("same", rounds=FAST)


def test_check_password_with_hashed_and_plain_entries():
    users = {"alice": passwords.hash_password("wonderland", rounds=FAST), "bob": "builder"}
    assert passwords.check_password(users, "alice", "wonderland") == "alice"
    assert passwords.check_password(users, "alice", "builder") is None
    assert passwords.check_password(users, "bob", "builder") == "bob"
    assert passwords.check_password(users, "carol", "wonderland") is None


def test_an_unknown_user_takes_as_long_as_a_wrong_password():
    """Timing must not tell which names exist: both run one bcrypt check of the same cost."""
    users = {"alice": passwords.hash_password("wonderland")}

    def took(name):
        start = time.perf_counter()
        passwords.check_password(users, name, "guess")
        return time.perf_counter() - start
    known, unknown = min(took("alice") for _ in range(3)), min(took("nobody") for _ in range(3))
    assert unknown > known / 3, (known, unknown)


def test_every_name_costs_one_bcrypt_check_of_the_same_rounds(monkeypatch):
    """A hashed user, a plain-text one and a name that does not exist each cost one bcrypt check
    of 2^12 rounds, right password or wrong: the answer's time tells none of them apart."""
    users = {"alice": passwords.hash_password("wonderland"), "bob": "builder"}
    checked, real = [], passwords.bcrypt.checkpw
    monkeypatch.setattr(passwords.bcrypt, "checkpw", lambda data, hashed: checked.append(hashed[:7]) or real(data, hashed))
    for name, password in [("alice", "guess"), ("alice", "wonderland"), ("bob", "guess"), ("bob", "builder"),
                           ("nobody", "guess")]:
        checked.clear()
        passwords.check_password(users, name, password)
        assert checked == [b"$2b$12$"], (name, password, checked)


@pytest.mark.parametrize("password, problem", [("", "empty"), ("é" * 37, "74 bytes")])
def test_passwords_bcrypt_cannot_hold_are_refused(password, problem):
    with pytest.raises(passwords.BadInput, match=problem):
        passwords.hash_password(password)


def test_the_plain_warning_names_the_users_never_the_passwords():
    users = {"alice": passwords.hash_password("x", rounds=FAST), "bob": "builder", "carol": "s3cret"}
    warning = passwords.plain_warning(users)
    assert "bob, carol" in warning and "alice" not in warning
    assert "builder" not in warning and "s3cret" not in warning
    assert "hash-password" in warning
    assert passwords.plain_warning({"alice": users["alice"]}) is None


# --- ERNIE_USERS ---------------------------------------------------------------------

def test_settings_accept_hashed_entries():
    alice, bob = (passwords.hash_password(p, rounds=FAST) for p in ("wonderland", "builder"))
    settings = load_settings(users=f"alice:{alice}, bob:{bob}")
    assert settings.user_passwords == {"alice": alice, "bob": bob}


def test_a_cut_hash_is_refused_with_the_fix_and_without_echo():
    cut = passwords.hash_password("wonderland", rounds=FAST)[:30]
    with pytest.raises(SettingsError) as info:
        load_settings(users=f"alice:{cut}")
    message = str(info.value)
    assert "ERNIE_USERS=<hidden>" in message and "'alice'" in message
    assert "single quotes" in message and cut not in message


# --- ernie-chat hash-password ------------------------------------------------------------

CLI = [sys.executable, "-m", "server.cli", "hash-password"]


def run_cli(*args, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def test_hash_password_reads_stdin_in_scripts():
    done = run_cli("--user", "alice", stdin="wonder land\n")
    assert done.returncode == 0, done.stderr
    name, _, hashed = done.stdout.strip().partition(":")
    assert name == "alice" and passwords.matches(hashed, "wonder land")
    assert load_settings(users=done.stdout.strip()).user_passwords["alice"] == hashed


def test_hash_password_refuses_an_empty_password():
    done = run_cli(stdin="\n")
    assert done.returncode == 2 and done.stdout == ""
    assert "The password is empty" in done.stderr


def test_hash_password_on_a_terminal_does_not_echo_and_asks_twice():
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a real terminal
        os.chdir(ROOT)
        os.execv(sys.executable, [*CLI])
    seen = b""

    def read_until(marker: bytes):
        nonlocal seen
        deadline = time.monotonic() + 30
        while marker not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 1024)
                except OSError:  # the child closed the terminal
                    return
    read_until(b"Password: ")
    os.write(fd, b"typed-secret\n")
    read_until(b"Again: ")
    os.write(fd, b"typed-secret\n")
    read_until(b"ERNIE_USERS")
    os.waitpid(pid, 0)
    os.close(fd)
    text = seen.decode()
    assert "typed-secret" not in text, "the password was echoed"
    hashed = next(line for line in text.split() if line.startswith("$2b$"))
    assert passwords.matches(hashed, "typed-secret")


def test_up_warns_about_plain_passwords_before_starting(monkeypatch, capsys):
    """`up` says it in the terminal; the stack itself is not started here."""
    from server import cli
    from server.stack import supervisor
    started = []
    monkeypatch.setattr(supervisor, "run", lambda settings: started.append(settings) or 0)
    hashed = passwords.hash_password("x", rounds=FAST)
    monkeypatch.setenv("ERNIE_USERS", f"alice:{hashed},bob:builder")
    assert cli.main(["up"]) == 0 and started
    err = capsys.readouterr().err
    assert "WARNING" in err and "bob" in err and "alice" not in err and "builder" not in err
