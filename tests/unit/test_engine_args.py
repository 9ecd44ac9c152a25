"""server/stack/engine_args.py: Settings -> the vLLM command line and environment."""

from __future__ import annotations

import json
import shlex

import pytest

from server.settings import load_settings
from server.stack.engine_args import GIB, SERVE_MODULE, EngineCopy, engine_command, one_thread_per_core
from tests.support.engine_args import PYTHON, MODEL, command
SECRET = "sk-very-secret-4711"


pytestmark = pytest.mark.usefixtures("clean_env")


def value_of(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} should appear once in {argv}"
    return argv[argv.index(flag) + 1]


# --- common part ---------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_runs_vllm_serve_in_the_engine_python_with_the_model_first(device):
    argv = command(device, served_model_name="ernie", engine_host="0.0.0.0", engine_port=8123,
                   max_model_len=4096, dtype="bfloat16").argv
    # serve, not vllm.entrypoints.openai.api_server: only serve runs several API servers.
    assert argv[:4] == [PYTHON, "-m", SERVE_MODULE, MODEL]
    assert value_of(argv, "--served-model-name") == "ernie"
    assert value_of(argv, "--host") == "0.0.0.0"
    assert value_of(argv, "--port") == "8123"
    assert value_of(argv, "--max-model-len") == "4096"
    assert value_of(argv, "--dtype") == "bfloat16"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_one_api_server_is_vllms_default_and_more_are_asked_for(device):
    settings = load_settings()
    one = engine_command(settings, MODEL, device, PYTHON, EngineCopy.only(settings, 1)).argv
    assert "--api-server-count" not in one
    four = engine_command(settings, MODEL, device, PYTHON, EngineCopy.only(settings, 4)).argv
    assert value_of(four, "--api-server-count") == "4"


def test_one_api_server_is_asked_for_with_data_parallel_copies_where_vllm_would_start_one_each():
    settings = load_settings(data_parallel_size=2)
    argv = engine_command(settings, MODEL, "cpu", PYTHON, EngineCopy.only(settings, 1)).argv
    assert value_of(argv, "--api-server-count") == "1"


def test_a_copy_listens_where_its_slot_says_with_its_share_of_the_gpu():
    settings = load_settings(engine_host="0.0.0.0", engine_port=8000, gpu_memory_utilization=0.9)
    argv = engine_command(settings, MODEL, "cuda", PYTHON,
                          EngineCopy("127.0.0.1", 41001, api_servers=2, index=1, copies=3)).argv
    assert (value_of(argv, "--host"), value_of(argv, "--port")) == ("127.0.0.1", "41001")
    assert value_of(argv, "--gpu-memory-utilization") == "0.3"   # 0.9 for the three together
    assert value_of(argv, "--api-server-count") == "2"


# --- cpu -------------------------------------------------------------------------

def bound(copy: EngineCopy, cpus, **settings) -> str | None:
    env = engine_command(load_settings(**settings), MODEL, "cpu", PYTHON, copy, cpus=cpus).env
    return env.get("VLLM_CPU_OMP_THREADS_BIND")


def test_cpu_copies_bind_their_threads_to_cores_of_their_own():
    copies = [EngineCopy("127.0.0.1", 41000 + i, index=i, copies=2) for i in range(2)]
    assert [bound(c, [0, 1]) for c in copies] == ["0", "1"]          # the 2-core machine
    # Two or more cores each: one left to the copy's own API server and engine core.
    assert [bound(c, range(16)) for c in copies] == ["0,1,2,3,4,5,6", "8,9,10,11,12,13,14"]
    three = [EngineCopy("127.0.0.1", 41000 + i, index=i, copies=3) for i in range(3)]
    assert [bound(c, [9, 3, 5, 7, 11, 13, 15]) for c in three] == ["3", "7", "11,13"]   # the last takes the rest


def test_vllm_binds_alone_for_one_copy_fewer_cores_than_copies_data_parallel_or_the_users_choice(monkeypatch):
    settings = load_settings()
    assert bound(EngineCopy.only(settings), [0, 1]) is None
    assert bound(EngineCopy("127.0.0.1", 41001, index=1, copies=3), [0, 1]) is None
    assert bound(EngineCopy("127.0.0.1", 41001, index=1, copies=2), [0, 1], data_parallel_size=2) is None
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert bound(EngineCopy("127.0.0.1", 41001, index=1, copies=2), [0, 1]) is None


def test_a_gpu_copy_binds_no_cpu_threads():
    env = engine_command(load_settings(), MODEL, "cuda", PYTHON,
                         EngineCopy("127.0.0.1", 41001, index=1, copies=2), cpus=[0, 1]).env
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env


def executor(copy: EngineCopy, cpus: list[int], **overrides) -> tuple[list[str], dict[str, str]]:
    found = engine_command(load_settings(**overrides), MODEL, "cpu", PYTHON, copy, cpus=cpus)
    return found.argv, found.env


def test_on_two_cores_the_worker_runs_in_the_engine_core_process():
    argv, env = executor(EngineCopy("127.0.0.1", 41000), [0, 1])
    assert value_of(argv, "--distributed-executor-backend") == "uni"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["OMP_NUM_THREADS"] == "1"   # one compute thread, as vLLM's binding gives it


def test_the_users_thread_count_is_left_to_a_worker_in_the_engine_core(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")   # inherited by the engine, not overridden
    assert "OMP_NUM_THREADS" not in executor(EngineCopy("127.0.0.1", 41000), [0, 1])[1]


@pytest.mark.parametrize("copy, cpus, overrides", [
    (EngineCopy("127.0.0.1", 41000), [0, 1, 2, 3], {}),                        # more cores
    (EngineCopy("127.0.0.1", 41000, index=0, copies=2), [0, 1], {}),           # copies
    (EngineCopy("127.0.0.1", 41000), [0, 1], {"data_parallel_size": 2}),     # vLLM's ranks
])
def test_elsewhere_vllms_bound_worker_process_stays(copy, cpus, overrides):
    argv, env = executor(copy, cpus, **overrides)
    assert "--distributed-executor-backend" not in argv and "VLLM_ENABLE_V1_MULTIPROCESSING" not in env


def test_a_binding_the_user_set_keeps_the_worker_process(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    argv, env = executor(EngineCopy("127.0.0.1", 41000), [0, 1])
    assert "--distributed-executor-backend" not in argv


def test_a_cpu_engine_uses_the_compile_cache_that_loads_unless_the_user_chose(monkeypatch):
    assert command("cpu").env["VLLM_USE_AOT_COMPILE"] == "0"
    assert "VLLM_USE_AOT_COMPILE" not in command("cuda").env
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert "VLLM_USE_AOT_COMPILE" not in command("cpu").env


def test_one_hardware_thread_of_each_core_counts(tmp_path):
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3", 4: "4"}.items():
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert one_thread_per_core([4, 3, 2, 1, 0, 9], tmp_path) == [0, 1, 4, 9]   # 9: the kernel says nothing


def test_cpu_sizes_the_kv_pool_at_one_gib_by_default():
    argv = command("cpu").argv
    assert value_of(argv, "--kv-cache-memory-bytes") == str(GIB) == "1073741824"


def test_cpu_kv_pool_follows_kv_cache_gib():
    argv = command("cpu", kv_cache_gib=2.5).argv
    assert value_of(argv, "--kv-cache-memory-bytes") == str(int(2.5 * 1024**3))


def test_cpu_never_gets_gpu_only_flags():
    argv = command("cpu", gpu_memory_utilization=0.5, enforce_eager=True,
                   tensor_parallel_size=2).argv
    assert "--gpu-memory-utilization" not in argv
    assert "--enforce-eager" not in argv
    assert "--tensor-parallel-size" not in argv


# --- cuda ------------------------------------------------------------------------

def test_cuda_gets_the_utilization_and_nothing_optional_by_default():
    argv = command("cuda", gpu_memory_utilization=0.85).argv
    assert value_of(argv, "--gpu-memory-utilization") == "0.85"
    assert "--kv-cache-memory-bytes" not in argv
    assert "--enforce-eager" not in argv
    assert "--tensor-parallel-size" not in argv
    assert "-tp" not in argv


def test_cuda_enforce_eager_only_when_set():
    assert "--enforce-eager" in command("cuda", enforce_eager=True).argv


def test_cuda_tensor_parallel_only_above_one():
    assert value_of(command("cuda", tensor_parallel_size=2).argv, "--tensor-parallel-size") == "2"


def test_cuda_kv_cache_gib_sets_the_pool_in_bytes():
    argv = command("cuda", kv_cache_gib=4).argv
    assert value_of(argv, "--kv-cache-memory-bytes") == str(4 * GIB)


# --- cache and batching -------------------------------------------------------------

@pytest.mark.parametrize("enabled, present, absent", [
    (True, "--enable-prefix-caching", "--no-enable-prefix-caching"),
    (False, "--no-enable-prefix-caching", "--enable-prefix-caching"),
])
def test_prefix_caching_flag_is_always_explicit(enabled, present, absent):
    argv = command("cuda", enable_prefix_caching=enabled).argv
    assert present in argv
    assert absent not in argv


def test_kv_cache_dtype_only_when_not_auto():
    assert "--kv-cache-dtype" not in command("cuda").argv
    assert value_of(command("cuda", kv_cache_dtype="fp8").argv, "--kv-cache-dtype") == "fp8"


def test_batching_limits_only_when_set():
    argv = command("cuda").argv
    assert "--max-num-seqs" not in argv
    assert "--max-num-batched-tokens" not in argv
    argv = command("cuda", max_num_seqs=32, max_num_batched_tokens=2048).argv
    assert value_of(argv, "--max-num-seqs") == "32"
    assert value_of(argv, "--max-num-batched-tokens") == "2048"


def test_extra_args_are_shell_split_and_appended_last():
    argv = command("cpu", extra_engine_args="--seed 7 --chat-template 'my template.jinja'").argv
    assert argv[-4:] == ["--seed", "7", "--chat-template", "my template.jinja"]


# --- the API key --------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_api_key_travels_in_env_only(device):
    cmd = command(device, api_key=SECRET)
    assert cmd.env["VLLM_API_KEY"] == SECRET
    assert not any(SECRET in arg for arg in cmd.argv)
    assert "--api-key" not in cmd.argv
    assert SECRET not in cmd.printable()


def test_no_api_key_no_env():
    assert "VLLM_API_KEY" not in command("cpu").env


@pytest.mark.parametrize("device, setting, method", [
    ("cuda", "auto", "fork"), ("cpu", "auto", "fork"),
    ("cuda", "spawn", "spawn"), ("cpu", "spawn", "spawn"),
])
def test_engine_core_process_start_method(device, setting, method):
    # auto: the engine core is forked so it inherits vLLM's imports (vllm_serve keeps fork on
    # the CPU build, which asks for spawn).
    cmd = command(device, engine_process_start=setting)
    assert cmd.env["VLLM_WORKER_MULTIPROC_METHOD"] == method


@pytest.mark.parametrize("device, method", [("cpu", "spawn"), ("cuda", "fork")])
def test_data_parallel_on_a_cpu_spawns_its_engine_cores(device, method):
    # Forked, a data-parallel head on a busy CPU hung on a request (engine_args.start_method).
    data_parallel = dict(data_parallel_size=2, data_parallel_size_local=1, data_parallel_address="127.0.0.1")
    assert command(device, **data_parallel).env["VLLM_WORKER_MULTIPROC_METHOD"] == method
    asked = command(device, engine_process_start="fork", **data_parallel)
    assert asked.env["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("overrides, app_s, engine_s", [
    ({}, 60.0, "75"),                                        # the engine up starts
    ({"engine_keepalive_s": 100}, 100.0, "115"),
    ({"engine_url": "http://10.0.0.7:8000"}, 2.0, "17"),    # vLLM's 5 s may hold there
])
def test_the_engine_keeps_idle_connections_longer_than_the_app_does(device, overrides, app_s, engine_s):
    settings = load_settings(**overrides)
    assert settings.app_keepalive_s == app_s
    assert engine_command(settings, MODEL, device, PYTHON).env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == engine_s


def test_printable_is_the_argv_as_one_shell_line():
    cmd = command("cpu", extra_engine_args="--chat-template 'a b.jinja'")
    assert shlex.split(cmd.printable()) == cmd.argv


# --- one fast stream ------------------------------------------------------------------

SINGLE_STREAM_FLAGS = ("--performance-mode", "--stream-interval", "--async-scheduling",
                       "--no-async-scheduling", "--speculative-config")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_single_stream_settings_pass_nothing_by_default(device):
    argv = command(device).argv
    assert not [a for a in argv if a in SINGLE_STREAM_FLAGS or a.startswith("-cc")]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["interactivity", "throughput"])
def test_performance_mode_when_not_balanced(device, mode):
    assert value_of(command(device, performance_mode=mode).argv, "--performance-mode") == mode


@pytest.mark.parametrize("mode", ["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_cudagraph_mode_is_a_compilation_config_field_on_gpu_only(mode):
    assert f"-cc.cudagraph_mode={mode}" in command("cuda", cudagraph_mode=mode).argv
    assert not any(a.startswith("-cc") for a in command("cpu", cudagraph_mode=mode).argv)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_compile_off_is_compilation_mode_none(device):
    assert command(device, torch_compile="off").argv.count("-cc.mode=0") == 1
    assert not any(a.startswith("-cc.mode") for a in command(device, torch_compile="on").argv)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_compile_auto_is_vllms_choice(device):
    assert "-cc.mode=0" not in command(device).argv


def test_without_compile_a_gpu_keeps_whole_step_cuda_graphs():
    """vLLM's default graphs need the compiled pieces; without them it would capture none."""
    assert "-cc.cudagraph_mode=FULL_DECODE_ONLY" in command("cuda", torch_compile="off").argv
    assert "-cc.cudagraph_mode=FULL" in command("cuda", torch_compile="off", cudagraph_mode="FULL").argv
    assert not any(a.startswith("-cc.cudagraph") for a in command("cpu", torch_compile="off").argv)


def test_a_gpu_engine_keeps_one_triton_cache_for_every_configuration(monkeypatch, tmp_path):
    """Else Inductor moves Triton's cache to one per configuration, and each new one compiles
    vLLM's kernels again (engine_args.triton_cache)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert command("cuda").env["TRITON_CACHE_DIR"] == str(tmp_path / ".triton" / "cache")
    assert "TRITON_CACHE_DIR" not in command("cpu").env
    monkeypatch.setenv("TRITON_CACHE_DIR", "/data/triton")  # the user's own: the engine inherits it
    assert "TRITON_CACHE_DIR" not in command("cuda").env


@pytest.mark.parametrize("runner, value", [("v1", "0"), ("v2", "1")])
def test_model_runner_is_vllms_variable_when_chosen(runner, value):
    assert "VLLM_USE_V2_MODEL_RUNNER" not in command("cuda").env
    assert command("cuda", model_runner=runner).env["VLLM_USE_V2_MODEL_RUNNER"] == value


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stream_interval_when_set(device):
    assert value_of(command(device, stream_interval=8).argv, "--stream-interval") == "8"


@pytest.mark.parametrize("value, present, absent", [
    ("on", "--async-scheduling", "--no-async-scheduling"),
    ("off", "--no-async-scheduling", "--async-scheduling"),
])
def test_async_scheduling_on_or_off(value, present, absent):
    argv = command("cuda", async_scheduling=value).argv
    assert argv.count(present) == 1 and absent not in argv


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_engine_stats_are_off_only_when_asked(device):
    assert "--disable-log-stats" not in command(device).argv
    assert command(device, engine_stats=False).argv.count("--disable-log-stats") == 1


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_speculative_ngram_is_a_json_speculative_config(device):
    config = json.loads(value_of(command(device, speculative_ngram="3").argv, "--speculative-config"))
    assert config == {"method": "ngram", "num_speculative_tokens": 3,
                      "prompt_lookup_max": 4, "prompt_lookup_min": 2}
