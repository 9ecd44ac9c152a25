"""bench --app-cost: a small real run (CPU vLLM, the real app); its arithmetic is tests/unit/'s."""

from __future__ import annotations

import json

import pytest

from server import cli
from server.paths import ROOT


def test_a_small_real_run_against_main_writes_its_figures(engine, tmp_path, capsys):
    settings, _ = engine
    out = tmp_path / "cost"
    code = cli.main(["bench", "--app-cost", "--url", settings.engine_base_url, "--concurrency", "4",
                     "--output-len", "16", "--repetitions", "1", "--baseline-root", str(ROOT),
                     "--baseline-env", "UVICORN_WS_PROTOCOL=wsproto", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads((out / "app-cost.json").read_text())
    for label in ("this checkout", "baseline"):
        (only,) = result["runs"][label]
        assert only["reply_tokens"] == 4 * 16 and only["complete"] == 4 and only["cpu_s"] > 0
        assert only["cpu_s_per_1k_tokens"] == pytest.approx(only["cpu_s"] / 64 * 1000)
    assert result["ratio"]["4"]["n"] == 1 and "CPU per token" in printed
