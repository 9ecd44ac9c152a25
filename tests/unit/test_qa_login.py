"""`ernie-chat qa-load --login`: its arguments and errors, then chats on the real app with
login and saved chats (Chainlit, the session's CPU vLLM, demo model), in both modes and
from client processes."""

from __future__ import annotations


import pytest

from server import cli
from server.loadtest.lib import login
from server.loadtest.lib.chat_socket import QaLoadError
from server.stack.balancer import STICKY_COOKIE
from server.stack.processes import free_port

USER, PASSWORD = "alice", "wonderland"  # conftest's saved_chats_app


def test_a_missing_password_is_refused_with_the_variable_to_set(monkeypatch, capsys):
    monkeypatch.delenv(login.PASSWORD_ENV, raising=False)
    # No app at the URL: the password is asked for before anything is reached.
    assert cli.main(["qa-load", "--url", f"http://127.0.0.1:{free_port()}", "--login", USER]) == 2
    err = capsys.readouterr().err
    assert f"--login {USER} needs the password" in err and f"set {login.PASSWORD_ENV}" in err, err


def test_the_chats_cookie_is_the_logins_without_the_worker_pin():
    assert login.chat_cookie({"access_token": "t", STICKY_COOKIE: "app1", "device": "d"}) == \
        "access_token=t; device=d"


@pytest.mark.parametrize("status, says", [(401, "refused the login of 'alice' (401): check the name, "
                                                 "ERNIE_QA_PASSWORD"),
                                          (429, "throttled the login of 'alice' (429"),
                                          (500, "failed with HTTP 500")])
def test_a_refused_login_says_its_status_and_what_to_check(status, says):
    assert says in login.refusal(status, USER, "http://app")


async def test_a_client_process_takes_its_parents_cookie_and_never_logs_in():
    environ = {login.COOKIE_ENV: "access_token=t"}  # and no password: a login would fail
    url = f"http://127.0.0.1:{free_port()}"
    assert await login.chat_cookie_for(url, None, environ, from_parent=True) == "access_token=t"
    assert await login.chat_cookie_for(url, None, {}) == ""


def test_client_processes_get_the_cookie_not_the_password():
    env = login.client_environment("access_token=t", {login.PASSWORD_ENV: PASSWORD, "PATH": "/bin"})
    assert env == {"PATH": "/bin", login.COOKIE_ENV: "access_token=t"}
    assert login.client_environment("", {login.PASSWORD_ENV: PASSWORD}) is None


async def test_an_app_that_is_not_there_is_reported_before_the_login():
    with pytest.raises(QaLoadError, match="No chat app answers"):
        await login.log_in(f"http://127.0.0.1:{free_port()}", USER, {login.PASSWORD_ENV: PASSWORD})
