"""server/stack/app_tier: what each Chainlit worker is started with (no process is started)."""

from __future__ import annotations

import pytest

from server.paths import ROOT
from server.settings import load_settings
from server.stack.app_tier import AppTier

pytestmark = pytest.mark.usefixtures("clean_env")


def worker_env(tmp_path, **overrides) -> dict[str, str]:
    tier = AppTier(load_settings(**overrides), "127.0.0.1", (8081, 8082), "http://127.0.0.1:8000",
                   ROOT, tmp_path / "llm.log")
    assert [w.proc.argv[1:3] for w in tier.workers] == [["-m", "app.serve"]] * 2
    return tier.workers[1].proc.env


@pytest.mark.parametrize("overrides, keepalive", [
    ({}, 60.0),                                          # the engine up starts
    ({"engine_url": "http://10.0.0.7:8000"}, 2.0),       # one elsewhere
])
def test_a_worker_keeps_engine_connections_as_long_as_the_engine_allows(tmp_path, monkeypatch,
                                                                         overrides, keepalive):
    env = worker_env(tmp_path, **overrides)
    assert env["ERNIE_ENGINE_URL"] == "http://127.0.0.1:8000" and env["ERNIE_WORKER_INDEX"] == "1"
    # The worker reads its settings from this environment, its engine_url always set.
    for key, value in env.items():
        if key.startswith("ERNIE_"):
            monkeypatch.setenv(key, value)
    assert load_settings().app_keepalive_s == keepalive
