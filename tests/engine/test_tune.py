"""`tune`: real sweeps on CPU; one point of two engine copies behind HAProxy, run by users."""

from __future__ import annotations

import json


from server import cli
from server.loadtest.sweep import tune
from server.stack.processes import _group_alive, port_free
from server.stack.vllm_log import api_server_count, read_tail


# --- one real sweep ------------------------------------------------------------------------------

def test_real_sweep_on_cpu_repeats_each_point_and_resumes_after_its_time_limit(demo_model, engine_python, tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nERNIE_MAX_MODEL_LEN=1024\n")
    argv = [
        "tune", "--model", str(demo_model), "--engine-python", str(engine_python), "--device", "cpu",
        "--engine-args=--enforce-eager", "--kv-cache-gib", "0.25", "--max-model-len", "512,1024",
        "--vary", "api_servers=2", "--need-max-model-len", "600", "--concurrency", "2",
        "--num-prompts", "6", "--input-len", "32", "--output-len", "16", "--repeats", "3",
        "--point-timeout-s", "400", "--out", str(tmp_path / "tune"), "--write-env",
        "--env-file", str(env_file)]
    # 10 s is less than a start takes here (16 s or more): the sweep cuts its first point
    # short, stops with points left, says so with exit code 3, and writes nothing to .env.
    assert cli.main(argv + ["--total-timeout-s", "10"]) == tune.EXIT_RESUMABLE
    cut = json.loads((tmp_path / "tune" / "tune.json").read_text())["points"]
    assert any(p["status"] in ("not run", "cut") for p in cut), cut
    assert env_file.read_text() == "# mine\nERNIE_MAX_MODEL_LEN=1024\n"
    argv += ["--total-timeout-s", "900", "--resume"]
    code = cli.main(argv)
    result = json.loads((tmp_path / "tune" / "tune.json").read_text())
    points = result["points"]
    assert [p["status"] for p in points] == ["measured", "measured"], points
    for n, point in enumerate(points, 1):
        assert [r["completed"] for r in point["runs"]] == [6, 6, 6]
        assert point["spread"]["goodput"]["n"] == 3 and point["goodput"] > 0
        # Every run sent prompts of its own: the prefix cache served (almost) none of them.
        assert all(r["prefix_cache_hit_rate"] < 0.1 for r in point["runs"]), point["runs"]
        assert point["kv_tokens"] and point["served_max_model_len"] == point["point"]["values"]["max_model_len"]
        assert (tmp_path / "tune" / f"point-0{n}" / "run-3" / "bench.json").exists()
        phases = {p["name"]: p["seconds"] for p in point["startup_phases"]}
        assert "model load" in phases and "API server: engine handshake, HTTP routes" in phases
        assert sum(phases.values()) <= point["startup_s"] + 2
        # A setting that starts more processes reached vLLM: it ran two API servers.
        assert api_server_count(read_tail(tmp_path / "tune" / f"point-0{n}-engine.log")) == 2
    # Only the 1024 point serves 600-token requests.
    assert code == 0 and result["chosen"] == 1
    assert result["chosen_env"] == {"ERNIE_MAX_MODEL_LEN": "1024", "ERNIE_KV_CACHE_GIB": "0.25",
                                    "ERNIE_API_SERVERS": "2"}
    assert env_file.read_text().startswith("# mine\nERNIE_MAX_MODEL_LEN=1024\n")
    assert "ERNIE_API_SERVERS=2" in env_file.read_text()
    assert (tmp_path / "tune" / "tune.png").stat().st_size > 0
    # No engine is left: every point's process group (vLLM's engine core too) is gone.
    assert not any(_group_alive(p["pid"]) for p in points)
    assert all(port_free("127.0.0.1", p["port"]) for p in points)
    # Going on with a finished sweep starts nothing and makes the same choice.
    assert cli.main(argv) == 0
    again = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert again["chosen"] == 1 and [p["runs"] for p in again["points"]] == [p["runs"] for p in points]


def test_a_point_with_two_engine_copies_runs_them_behind_haproxy_under_users(demo_model, engine_python,
                                                                              tmp_path, capsys):
    """engine_copies is swept as `up` runs it: two vLLMs, HAProxy in front, both serving; each
    run a steady state of chat users, judged by the users objective (one no CPU vLLM misses)."""
    out = tmp_path / "tune"
    argv = ["tune", "--model", str(demo_model), "--engine-python", str(engine_python), "--device",
            "cpu", "--engine-args=--enforce-eager", "--kv-cache-gib", "0.25", "--max-model-len", "512",
            "--need-max-model-len", "512", "--vary", "engine_copies=2", "--users", "4", "--think-s", "0.5",
            "--ramp-s", "1", "--step-s", "5", "--objective-ttft-p99-ms", "60000",
            "--objective-tokens-per-s", "0.1", "--output-len", "16", "--repeats", "2",
            "--point-timeout-s", "600", "--out", str(out)]
    assert cli.main(argv) == 0
    result = json.loads((out / "tune.json").read_text())
    point = result["points"][0]
    assert point["status"] == "measured" and point["missed"] == ["", ""], point
    for n, run in enumerate(point["runs"], 1):
        # Only the steady state's replies count: the users sent some during their ramp too.
        steady = json.loads((out / "point-01" / f"run-{n}" / "summary.json").read_text())
        assert run["requests"] == steady["summary"]["steady"]["replies"] > 0 and run["goodput"] > 0, run
        assert steady["cpu"]["busy_cores"], steady["cpu"]  # the machine's CPU by kind of process
    assert result["chosen"] == 0 and result["chosen_env"]["ERNIE_ENGINE_COPIES"] == "2"
    assert "2 run(s) of 4 users (think 0.5 s, ramp 1 s, steady 5 s)" in capsys.readouterr().out
    # Both copies served requests of the runs: HAProxy spread them.
    for log in ("point-01-engine.log", "point-01-engine-copy1.log"):
        text = (out / log).read_text()
        assert "POST /v1/chat/completions" in text or "POST /v1/completions" in text, log
    assert "engine" in (out / "point-01-engine-haproxy.cfg").read_text()
    assert not _group_alive(point["pid"]) and port_free("127.0.0.1", point["port"])
