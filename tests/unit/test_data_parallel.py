"""Several GPUs and machines through vLLM's own data parallelism: settings, command lines,
and, for real on this CPU, a head whose second engine copy runs on a "machine" of engine
copies only (`up` with ERNIE_NODE_ROLE=engines: `vllm serve --headless`)."""

from __future__ import annotations

import re

import pytest

from server.settings import SettingsError, load_settings
from server.stack.engine_args import EngineCopy, engine_command
from server.stack.processes import free_port
from server.stack.topology import plan_topology
from server.stack.vllm_log import START_MARKER, engines_ready

MODEL, PYTHON = "baidu/ERNIE-4.5-0.3B-PT", "python"


pytestmark = pytest.mark.usefixtures("clean_env")


def flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            for i, a in enumerate(argv) if a.startswith("--")}


# --- settings -----------------------------------------------------------------------------------

@pytest.mark.parametrize("values, says", [
    (dict(data_parallel_size=2, data_parallel_size_local=3), "the local copies are part of all copies"),
    (dict(data_parallel_size=4, data_parallel_size_local=2), "need ERNIE_DATA_PARALLEL_ADDRESS"),
    (dict(node_role="engines"), "ERNIE_NODE_ROLE=engines runs copies for a head elsewhere"),
    (dict(node_role="engines", data_parallel_size=2, data_parallel_size_local=1,
          data_parallel_address="10.0.0.1"), "ERNIE_DATA_PARALLEL_START_RANK"),
])
def test_incoherent_data_parallel_settings_are_refused_with_what_to_set(values, says):
    with pytest.raises(SettingsError, match=re.escape(says)):
        load_settings(**values)


# --- command lines ------------------------------------------------------------------------------

def test_one_machine_with_two_gpus_is_one_server_of_two_copies():
    s = load_settings(data_parallel_size=2, api_servers=4)
    argv = engine_command(s, MODEL, "cuda", PYTHON, EngineCopy.only(s, 4)).argv
    f = flags(argv)
    assert f["--data-parallel-size"] == "2" and f["--api-server-count"] == "4"
    assert "--data-parallel-address" not in f and "--headless" not in f


def test_the_head_of_two_machines_names_its_address_and_port():
    s = load_settings(data_parallel_size=4, data_parallel_size_local=2,
                      data_parallel_address="10.0.0.1", data_parallel_rpc_port=13345)
    f = flags(engine_command(s, MODEL, "cuda", PYTHON).argv)
    assert (f["--data-parallel-size"], f["--data-parallel-size-local"]) == ("4", "2")
    assert (f["--data-parallel-address"], f["--data-parallel-rpc-port"]) == ("10.0.0.1", "13345")


def test_an_engines_machine_runs_headless_copies_from_its_start_rank_and_no_api_server():
    s = load_settings(node_role="engines", data_parallel_size=4, data_parallel_size_local=2,
                      data_parallel_address="10.0.0.1", data_parallel_start_rank=2, api_servers=4)
    f = flags(engine_command(s, MODEL, "cuda", PYTHON, EngineCopy.only(s, 4)).argv)
    assert "--headless" in f and f["--data-parallel-start-rank"] == "2"
    assert "--api-server-count" not in f            # vLLM refuses it with --headless
    topology = plan_topology(s, "cuda", 16, free_port)
    assert topology.worker_ports == () and not topology.needs_balancer


def test_each_copy_per_gpu_is_a_data_parallel_group_with_a_port_of_its_own():
    s = load_settings(data_parallel_size=4, data_parallel_size_local=2, engine_copies=2,
                      data_parallel_address="10.0.0.1", data_parallel_rpc_port=13345,
                      gpu_memory_utilization=0.9)
    second = EngineCopy("127.0.0.1", 41001, 1, index=1, copies=2)
    f = flags(engine_command(s, MODEL, "cuda", PYTHON, second).argv)
    assert f["--data-parallel-rpc-port"] == "13346" and f["--gpu-memory-utilization"] == "0.45"


def test_a_headless_node_is_ready_when_its_copies_have_loaded():
    lines = [f"{START_MARKER} at 10:00",
             "(EngineCore_DP1 pid=2) INFO [core.py:402] init engine (profile, create kv cache, warmup model) took 47.89 s"]
    assert engines_ready(lines) == 1
    assert engines_ready(lines + [f"{START_MARKER} at 10:05"]) == 0     # a new start


def test_plan_counts_copies_per_gpu_times_gpus_and_the_users_they_serve(capsys, monkeypatch):
    import json

    from server import cli
    assert cli.main(["plan", "--model", MODEL, "--gpu-memory-gib", "141", "--engine-copies", "2",
                     "--users-per-copy", "500", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["copies_in_all"] == 2 and one["users_in_all"] == 1000
    assert one["all_copies"]["kv_pool_tokens"] == 2 * one["kv_pool_tokens"]
    monkeypatch.setenv("ERNIE_DATA_PARALLEL_SIZE", "4")  # four GPUs (or machines), two copies each
    assert cli.main(["plan", "--model", MODEL, "--gpu-memory-gib", "141", "--engine-copies", "2",
                     "--users-per-copy", "500", "--json"]) == 0
    eight = json.loads(capsys.readouterr().out)
    assert eight["copies_in_all"] == 8 and eight["users_in_all"] == 4000
