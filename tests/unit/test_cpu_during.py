"""`ernie-chat cpu-during`: the machine's CPU by kind of process while a burst runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from server.loadtest.lib import cpu
from server.paths import ROOT

SPIN = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


def test_a_process_is_grouped_by_what_it_runs():
    assert cpu.group_of("VLLM::EngineCore_DP0") == "engine core"
    assert cpu.group_of("python -m app.serve run /x/app/chat.py --headless") == "app workers"
    assert cpu.group_of("python -m server.cli qa-load --sessions 1000 --json") == "load clients"
    assert cpu.group_of("python -m server.cli cpu-during out.json") == "other"


def test_cpu_time_is_read_after_the_command_name_whatever_it_holds():
    # Field 2 may contain spaces and parentheses; utime and stime are fields 14 and 15.
    stat = "4242 (python (x) y) S 1 2 3 4 5 6 7 8 9 10 " + f"{3 * cpu.TICKS_PER_S} {cpu.TICKS_PER_S} 0 0 20"
    assert cpu.cpu_seconds(stat) == pytest.approx(4.0)


def sample(t: float, **groups: float) -> dict:
    """A sample as the sampler writes it: the clock, and each group's CPU-seconds so far."""
    return {"t": t, "groups": {name.replace("_", " "): used for name, used in groups.items()}}


def test_the_machines_busy_cores_are_the_sum_of_its_processes():
    # (/proc/stat counts the host's cores on the lent H200, not the container's)
    busy = cpu.cores(sample(10.0, app_workers=1.0, engine_core=0.5),
                            sample(10.5, app_workers=4.0, engine_core=1.0, balancer=0.1))
    assert busy["app workers"] == 6.0 and busy["engine core"] == 1.0
    assert abs(busy["balancer"] - 0.2) < 1e-9 and abs(busy["machine"] - 7.2) < 1e-9


def test_steps_shorter_than_the_sampling_period_span_the_samples_around_them():
    samples = [sample(0.0, app_workers=0.0), sample(0.15, app_workers=1.2), sample(0.4, app_workers=1.2)]
    first, second, third = cpu.steps(samples, 0.0, step_s=0.1, count=3)
    assert first["app workers"] == 8.0  # 0.0-0.1 lies between the samples at 0 and 0.15
    assert abs(second["app workers"] - 3.0) < 1e-9  # 0.1-0.2: between 0 and 0.4
    assert third["app workers"] == 0.0  # 0.2-0.3: between 0.15 and 0.4, nothing used
    assert cpu.steps(samples, 0.35, step_s=0.1, count=1) == [{}]  # past the last sample


def test_a_load_client_that_exits_before_the_sampler_stops_still_counts(tmp_path):
    out = tmp_path / "cpu.json"
    sampler = subprocess.Popen([sys.executable, "-m", "server.cli", "cpu-during", str(out)], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    assert sampler.stdout.readline().startswith("sampling")  # the command line has started
    time.sleep(0.5)
    started = time.monotonic()
    # A process whose command line says it is one of the load tools, spinning for 1 CPU-second.
    subprocess.run([sys.executable, "-c", SPIN, "server.loadtest.probe"], check=True)
    # Its share of a core while it ran: 1 CPU-second over its wall time (below 1 where the
    # machine's cores are busy with other work, as beside a vLLM start in a full test run).
    share = min(1.0, 1.0 / (time.monotonic() - started))
    time.sleep(0.5)
    sampler.send_signal(signal.SIGINT)
    printed, _ = sampler.communicate(timeout=30)
    result = json.loads(out.read_text())
    assert result["whole"]["load clients"] * result["seconds"] > 0.8  # ~1 CPU-second, kept
    assert result["busiest_1s"]["load clients"] > 0.5 * share, share
    second = cpu.window(result["samples"], started)
    assert second["load clients"] > 0.4 * share, share
    assert "busy cores, the busiest second" in printed and "load clients" in printed


@pytest.mark.parametrize("signum, to", [(signal.SIGTERM, "parent"), (signal.SIGINT, "group"),
                                        (signal.SIGTERM, "group")])
def test_the_sampler_under_a_shell_stops_and_writes_its_result(tmp_path, signum, to):
    # `; true` keeps bash as the sampler's parent (a lone command would be exec'd in its place).
    # A SIGINT to that bash alone is not here: bash waits for its child first (cpu.py says so).
    out = tmp_path / "cpu.json"
    shell = subprocess.Popen(["bash", "-c", f'"{sys.executable}" -m server.cli cpu-during "{out}"; true'],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert shell.stdout.readline().startswith("sampling")
    if to == "parent":
        shell.send_signal(signum)
    else:
        os.killpg(shell.pid, signum)
    printed, _ = shell.communicate(timeout=60)  # the pipe closes once the sampler has exited too
    result = json.loads(out.read_text())
    assert result["seconds"] > 0 and result["whole"]["machine"] >= 0
    assert "busy cores, the whole" in printed


def test_a_runs_figures_per_1000_tokens_come_from_its_busy_cores_and_seconds():
    figures = cpu.run_figures({"cores": 16, "seconds": 10.0, "samples": [],
                               "whole": {"machine": 8.0, "app workers": 2.0, "API servers": 1.5}})
    kept = cpu.with_tokens(figures, 50_000)
    assert kept["cpu_s_per_1k_tokens"]["app workers"] == pytest.approx(0.4)  # 20 CPU-s / 50k tokens
    assert kept["cpu_s_per_1k_tokens"]["machine"] == pytest.approx(1.6)
    assert "samples" not in kept and kept["tokens"] == 50_000
    printed = cpu.render_run(kept)
    assert "8.0 of 16 (app workers 2.0, API servers 1.5)" in printed
    assert "CPU-s per 1,000 tokens: 1.600 (app workers 0.400, API servers 0.300)" in printed
    assert cpu.with_tokens({}, 10) == {} and "not sampled" in cpu.render_run({})
    assert cpu.per_1k_tokens(figures, 0) == {}


def test_the_reports_table_has_a_column_per_kind_seen_in_any_run():
    first = cpu.with_tokens(cpu.run_figures({"cores": 2, "seconds": 4.0, "whole": {
        "machine": 1.5, "app workers": 1.0, "other": 0.5}}), 8_000)
    second = cpu.run_figures({"cores": 2, "seconds": 4.0, "whole": {"machine": 1.0, "engine core": 1.0}})
    headers, rows = cpu.table([(8, first), (16, second)], "users")
    assert headers == ["users", "cores", "machine", "engine core", "app workers", "other"]
    assert rows[0] == ["8", "2", "1.50 (0.750)", "-", "1.00 (0.500)", "0.50 (0.250)"]
    assert rows[1] == ["16", "2", "1.00", "1.00", "-", "-"]
