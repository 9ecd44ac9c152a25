"""server/stack/vllm_serve.record_listeners finds vLLM's socket factory where each vLLM keeps it.

vLLM 0.32 (the CPU engine the other tests start) has it in ``vllm.entrypoints.launchers``;
vLLM 0.26, the GPU build lent machines run, in ``vllm.entrypoints.openai.api_server``. That
layout is not installed here, so this test stands in a module for it (the function's body,
run on 0.32 by tests/engine/test_vllm_serve.py, is the same either way).
"""

from __future__ import annotations

import sys
import types

import pytest

from server.stack import vllm_serve


class Socket:
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def api_server_026(monkeypatch):
    """vLLM 0.26's layout: no launchers package, the factory in the API server's module."""
    module = types.ModuleType("vllm.entrypoints.openai.api_server")
    module.create_server_socket = lambda address: Socket()
    for name in ("vllm", "vllm.entrypoints", "vllm.entrypoints.openai"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.openai.api_server", module)
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.launchers", None)  # import fails
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.launchers.launcher", None)
    yield module
    vllm_serve._listeners.clear()


def test_vllm_026_sockets_are_recorded_from_the_api_servers_module(api_server_026):
    assert vllm_serve.record_listeners()
    sock = api_server_026.create_server_socket(("127.0.0.1", 8000))
    assert vllm_serve._listeners == [sock]
    vllm_serve._drop_listeners_in_child()  # what a forked engine core runs
    assert sock.closed and vllm_serve._listeners == []


def test_a_vllm_without_the_factory_is_left_alone(api_server_026):
    del api_server_026.create_server_socket
    assert not vllm_serve.record_listeners()
