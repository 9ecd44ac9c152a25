"""The live view's routes in a running app, and the engines it reads at once."""

from __future__ import annotations

import contextlib
import socket
import time
from types import SimpleNamespace

import httpx
import pytest

from app.pages.live_page import DATA, PAGE, read_engines
from server.passwords import hash_password
from server.stack.processes import free_port
from tests.support import openai_standin
from tests.support.settings import start_app


async def test_every_engine_is_read_at_once_and_one_down_hides_none_of_the_others():
    hung = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]  # they never answer
    with openai_standin.running("plain", 4096) as url, contextlib.ExitStack() as sockets:
        for listener in hung:
            sockets.enter_context(listener)
        engines = [SimpleNamespace(name=f"hung{i}", url=f"http://127.0.0.1:{s.getsockname()[1]}")
                   for i, s in enumerate(hung)]
        engines += [SimpleNamespace(name="plain", url=url),
                    SimpleNamespace(name="gone", url=f"http://127.0.0.1:{free_port()}")]
        async with httpx.AsyncClient(timeout=2) as http:
            started = time.monotonic()
            readings = await read_engines(http, engines)
            took = time.monotonic() - started
    assert [(r.name, r.engine_up, r.metrics) for r in readings] == [
        ("hung0", False, None), ("hung1", False, None), ("plain", True, None), ("gone", False, None)]
    assert took < 3.5, f"{took:.1f} s: the engines were read one after the other"


@pytest.fixture(scope="module")
def app_with_login(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live-login")
    yield from start_app(tmp, engine_url=f"http://127.0.0.1:{free_port()}", chat_db=tmp / "chats.db",
                         users=f"alice:{hash_password('wonderland', rounds=4)}")


def test_the_routes_are_served_before_chainlits_catch_all(app_on_plain_server):
    page = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", timeout=10)
    assert page.status_code == 200 and "window.LIVE" in page.text  # not Chainlit's index.html
    chinese = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", timeout=10,
                        headers={"accept-language": "zh-CN,zh;q=0.9"})
    assert "实时面板" in chinese.text and "ernie-chat live" not in chinese.text
    script = httpx.get(f"{app_on_plain_server.app_url}/live/live.js", timeout=10)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    data = httpx.get(f"{app_on_plain_server.app_url}{DATA}", timeout=10).json()
    assert data["metrics"] is False and data["engine_up"] is True
    assert data["server"] == app_on_plain_server.engine_url
    assert "window.LIVE" not in httpx.get(f"{app_on_plain_server.app_url}/thread/x", timeout=10).text


@pytest.mark.parametrize("asked", ["../../etc/passwd", "<img src=x onerror=alert(1)>"])
def test_a_name_no_model_has_is_never_echoed_and_brings_the_notice(app_on_plain_server, asked):
    page = httpx.get(f"{app_on_plain_server.app_url}{PAGE}", params={"model": asked}, timeout=10)
    assert page.status_code == 200 and '"unknown_model": true' in page.text
    assert asked not in page.text and "onerror" not in page.text
    data = httpx.get(f"{app_on_plain_server.app_url}{DATA}", params={"model": asked}, timeout=10)
    assert data.json()["unknown_model"] is True and len(data.json()["models"]) == 1
    assert asked not in data.text and "onerror" not in data.text


def test_with_login_on_the_data_need_the_chats_login(app_with_login):
    url = app_with_login.app_url
    assert httpx.get(f"{url}{DATA}", timeout=10).status_code == 401
    assert httpx.get(f"{url}{PAGE}", timeout=10).status_code == 200  # the empty page says "log in"
    with httpx.Client(timeout=10) as http:
        form = {"username": "alice", "password": "wonderland"}
        assert http.post(f"{url}/login", data=form).status_code == 200
        data = http.get(f"{url}{DATA}")
    assert data.status_code == 200 and data.json()["engine_up"] is False
