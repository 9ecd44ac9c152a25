"""The key the command line sends to an engine (server/engine_key.py): --api-key, then
ERNIE_API_KEY, then the key `up` generated, and that one only to this machine's own engines."""

from __future__ import annotations

import pytest

from server.cli import build_parser
from server.engine_key import EngineKey, engine_key
from server.loadtest.lib import load_args
from server.loadtest.lib.config import BenchError
from server.paths import GENERATED_ENGINE_KEY
from server.settings import load_settings

pytestmark = pytest.mark.usefixtures("clean_env")

GENERATED = "generated-" + "g" * 30
MODELS = "demo,demo-small"


@pytest.fixture
def root(tmp_path):
    """A repository root where `up` generated a key, as it does for an exposed engine."""
    (tmp_path / GENERATED_ENGINE_KEY).parent.mkdir(parents=True)
    (tmp_path / GENERATED_ENGINE_KEY).write_text(GENERATED + "\n")
    return tmp_path


def test_each_models_own_engine_gets_the_generated_key(root):
    settings = load_settings(models=MODELS, engine_host="0.0.0.0", engine_port=9100, kv_cache_gib=None)
    for url in ("http://127.0.0.1:9100", "http://127.0.0.1:9101/v1/", "http://127.0.0.1:9101/"):
        key = engine_key(settings, url, root=root)
        assert key.value == GENERATED and str(root / GENERATED_ENGINE_KEY) in key.source, url


def test_the_generated_key_never_goes_to_another_server(root):
    settings = load_settings(engine_port=9100)
    for url in ("http://127.0.0.1:9102", "http://gpu-box:9100", "http://127.0.0.1:91000"):
        assert engine_key(settings, url, root=root).value is None, url
    # ERNIE_ENGINE_URL: the engine runs elsewhere, even at this very address.
    elsewhere = load_settings(engine_url="http://127.0.0.1:9100")
    assert engine_key(elsewhere, "http://127.0.0.1:9100", root=root).value is None
    assert "neither --api-key nor ERNIE_API_KEY" in engine_key(elsewhere, "http://127.0.0.1:9100", root=root).source


def test_a_key_given_wins_over_the_generated_one(root):
    url = "http://127.0.0.1:8000"
    assert engine_key(load_settings(), url, "sk-flag", root=root) == EngineKey("sk-flag", "--api-key")
    settings = load_settings(api_key="sk-" + "e" * 20)
    assert engine_key(settings, url, root=root).value == "sk-" + "e" * 20
    assert engine_key(settings, url, root=root).source == "ERNIE_API_KEY"
    assert engine_key(settings, url, "sk-flag", root=root).source == "--api-key"


def test_without_any_key_none_is_sent(tmp_path):
    assert engine_key(load_settings(), "http://127.0.0.1:8000", root=tmp_path).value is None


def test_bench_accepts_its_own_engine_on_a_network_address(monkeypatch):
    """`up` listens on ERNIE_ENGINE_HOST, an address of this machine: bench loads it without --url;
    an engine elsewhere (ERNIE_ENGINE_URL) still needs --url."""
    monkeypatch.setenv("ERNIE_ENGINE_HOST", "192.0.2.7")
    _, cfg = load_args.engine_config(build_parser().parse_args(["bench", "--api-key", "sk-flag"]))
    assert (cfg.url, cfg.api_key, cfg.api_key_from) == ("http://192.0.2.7:8000", "sk-flag", "--api-key")
    monkeypatch.delenv("ERNIE_ENGINE_HOST")
    monkeypatch.setenv("ERNIE_ENGINE_URL", "http://192.0.2.7:8000")
    with pytest.raises(BenchError, match="not on this machine"):
        load_args.engine_config(build_parser().parse_args(["bench"]))
