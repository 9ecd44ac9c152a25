"""benchmarks/gpu/cpu_during.py: the machine's CPU by kind of process while a burst runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from server.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import cpu_during  # noqa: E402

SPIN = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


def test_a_process_is_grouped_by_what_it_runs():
    assert cpu_during.group_of("VLLM::EngineCore_DP0") == "engine core"
    assert cpu_during.group_of("python -m app.serve run /x/app/chat.py --headless") == "app workers"
    assert cpu_during.group_of("python -m server.cli qa-load --sessions 1000 --json") == "load clients"
    assert cpu_during.group_of("python3 benchmarks/gpu/cpu_during.py out.json") == "other"


def test_the_machines_busy_time_is_read_as_the_kernel_writes_it():
    # (each process's: app_cost.cpu_seconds, tested in test_app_cost.py)
    busy, total = cpu_during.busy_and_total("cpu  100 5 50 800 20 0 3 0 0 0")
    assert (busy, total) == (158, 978)


def test_a_load_client_that_exits_before_the_sampler_stops_still_counts(tmp_path):
    out = tmp_path / "cpu.json"
    sampler = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "gpu" / "cpu_during.py"), str(out)],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    started = time.monotonic()
    # A process whose command line says it is one of the load tools, spinning one core for 1 s.
    subprocess.run([sys.executable, "-c", SPIN, "server.loadtest.probe"], check=True)
    time.sleep(0.5)
    sampler.send_signal(signal.SIGINT)
    printed, _ = sampler.communicate(timeout=30)
    result = json.loads(out.read_text())
    assert result["whole"]["load clients"] * result["seconds"] > 0.8  # ~1 CPU-second, kept
    assert result["busiest_1s"]["load clients"] > 0.6
    second = cpu_during.window(result["samples"], started)
    assert second["load clients"] > 0.6 and second["machine"] >= second["load clients"] - 0.1
    assert "busy cores, the busiest second" in printed and "load clients" in printed
