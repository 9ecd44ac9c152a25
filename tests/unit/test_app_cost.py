"""bench --app-cost: its arithmetic, then a small real run (CPU vLLM, the real app)."""

from __future__ import annotations
import argparse
from pathlib import Path

import pytest

from server.loadtest.chat.cost import (CostRun, Variant, add_variant_arguments, alternate, ratios, spread,
                                       summarize_cost_runs, variants_from)


def run(sessions: int, cpu_s: float, tokens: int = 2000) -> CostRun:
    return CostRun(sessions, cpu_s, tokens, 10.0, sessions, 100.0, 150.0)


def test_cost_per_thousand_tokens_with_mean_and_spread_per_level():
    summary = summarize_cost_runs([run(32, 0.2), run(32, 0.4), run(64, 0.6, tokens=4000), run(64, 1.0, 0)])
    assert summary["32"]["cpu_s_per_1k_tokens"] == {"mean": pytest.approx(0.15), "stdev": pytest.approx(0.05),
                                                    "min": 0.1, "max": 0.2, "n": 2}
    assert summary["64"]["cpu_s_per_1k_tokens"]["n"] == 1  # a run without tokens has no figure
    assert spread([])["mean"] is None


def test_variants_alternate_abba_and_pair_in_order():
    a, b = Variant("a", None, {}), Variant("b", None, {})
    assert [v.label for v in alternate([a, b], 4)] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    r = ratios({"a": [run(8, 0.1), run(8, 0.3)], "b": [run(8, 0.2), run(8, 0.6)]}, "a", "b")
    assert r["8"]["mean"] == pytest.approx(0.5) and r["8"]["n"] == 2


def test_a_benchmark_scripts_variants_are_this_checkout_or_both_in_turn(tmp_path):
    parser = argparse.ArgumentParser()
    add_variant_arguments(parser)
    alone = variants_from(parser.parse_args(["--app-env", "A=1"]), Path("."))
    assert [(v.label, v.env) for v in alone] == [("this", {"A": "1"})]
    both = variants_from(parser.parse_args(["--baseline-root", str(tmp_path), "--pairs", "2"]), Path("."))
    assert [v.label for v in both] == ["this", "baseline", "baseline", "this"]
    assert both[1].root == tmp_path.resolve()
    itself = variants_from(parser.parse_args(["--baseline-env", "B=2"]), Path("."))
    assert itself[1].root == Path(".").resolve() and itself[1].env == {"B": "2"}
