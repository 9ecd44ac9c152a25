"""One TLS context per process for the clients opened again and again (server/tls_contexts.py),
and the training's allocator settings (server/stack/provision.py)."""

from __future__ import annotations

import ssl

import httpx

from server import tls_contexts
from server.stack import provision
from server.stack.processes import free_port
from server.stack.readiness import http_ok, probe_engine


def test_each_kind_of_context_is_built_once_and_checks_as_asked():
    assert tls_contexts.shared() is tls_contexts.shared(True)
    assert tls_contexts.shared(False) is tls_contexts.shared(False)
    assert tls_contexts.shared().verify_mode == ssl.CERT_REQUIRED and tls_contexts.shared().check_hostname
    assert tls_contexts.shared(False).verify_mode == ssl.CERT_NONE


def test_the_readiness_probes_build_no_context_of_their_own(monkeypatch):
    """Polled 5 times a second while a child starts: each poll used to load every CA certificate."""
    built = []
    real = httpx.create_ssl_context

    def counting(verify=True, *args, **kwargs):
        if isinstance(verify, bool):  # a context loaded anew (not one handed in)
            built.append(verify)
        return real(verify, *args, **kwargs)
    monkeypatch.setattr(httpx, "create_ssl_context", counting)
    tls_contexts._context.cache_clear()
    monkeypatch.setattr("httpx._transports.default.create_ssl_context", counting)
    closed = f"http://127.0.0.1:{free_port()}"
    for _ in range(5):
        assert not http_ok(f"{closed}/health", timeout_s=1)
        assert not http_ok(f"{closed}/health", timeout_s=1, verify=False)
        assert probe_engine(closed, None, timeout_s=1) is None
    assert sorted(built) == [False, True], built  # each kind built once, on first use


def test_the_demo_models_training_keeps_its_large_tensors_in_the_heap_unless_the_user_chose():
    assert provision.training_env({}) == provision.TRAINING_MALLOC
    assert int(provision.TRAINING_MALLOC["MALLOC_MMAP_THRESHOLD_"]) > 37 * 2**20  # the logits of a step
    mine = provision.training_env({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert "MALLOC_TRIM_THRESHOLD_" not in mine and set(mine) == set(provision.TRAINING_MALLOC) - {
        "MALLOC_TRIM_THRESHOLD_"}
