"""server/settings/: defaults, every validator's message, .env handling, docs drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.settings import DEFAULT_MODEL, Settings, SettingsError, env_example, env_name, load_settings
from tests.support.settings import error_for

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("clean_env")


# --- defaults ----------------------------------------------------------------

def test_defaults():
    s = load_settings()
    assert s.model == DEFAULT_MODEL == "baidu/ERNIE-4.5-0.3B-PT"
    assert s.max_model_len == 8192
    assert s.gpu_memory_utilization == 0.9
    assert s.kv_cache_gib is None
    assert s.device == "auto"
    assert s.dtype == "auto"
    assert s.enable_prefix_caching is True
    assert s.enforce_eager is False
    assert s.tensor_parallel_size == 1
    assert s.extra_engine_args == ""
    assert (s.engine_port, s.app_port) == (8000, 8080)
    assert s.api_key is None and s.api_key_value is None


def test_by_default_the_engine_is_started_here_and_reached_on_loopback():
    s = load_settings()
    assert s.engine_url is None
    assert s.starts_engine is True
    assert s.engine_base_url == "http://127.0.0.1:8000"
    assert s.app_url == "http://127.0.0.1:8080"


def test_wildcard_listen_address_is_never_used_as_the_client_url(monkeypatch):
    monkeypatch.setenv("ERNIE_ENGINE_HOST", "0.0.0.0")
    monkeypatch.setenv("ERNIE_APP_HOST", "0.0.0.0")
    monkeypatch.setenv("ERNIE_OPEN_CHAT", "true")
    s = load_settings()
    assert s.engine_base_url == "http://127.0.0.1:8000"
    assert s.app_url == "https://127.0.0.1:8080"  # exposed: HTTPS (server/settings/tls.py)


def test_an_exposed_chat_needs_a_login_or_an_explicit_opt_out(monkeypatch):
    message = error_for(monkeypatch, "ERNIE_APP_HOST", "0.0.0.0")
    assert "ERNIE_APP_HOST=0.0.0.0" in message and "no login" in message
    assert "ERNIE_USERS=name:password" in message and "ERNIE_OPEN_CHAT=true" in message
    assert load_settings(open_chat=True).app_host == "0.0.0.0"
    assert load_settings(users="alice:pw").app_host == "0.0.0.0"
    monkeypatch.setenv("ERNIE_APP_HOST", "127.0.0.2")    # this machine only, like 127.0.0.1
    assert load_settings().users is None


def test_env_values_are_parsed_to_their_types(monkeypatch):
    monkeypatch.setenv("ERNIE_MAX_MODEL_LEN", "4096")
    monkeypatch.setenv("ERNIE_ENFORCE_EAGER", "true")
    monkeypatch.setenv("ERNIE_KV_CACHE_GIB", "2.5")
    monkeypatch.setenv("ERNIE_API_KEY", "sk-test")
    s = load_settings()
    assert s.max_model_len == 4096
    assert s.enforce_eager is True
    assert s.kv_cache_gib == 2.5
    assert s.api_key_value == "sk-test"
    assert "sk-test" not in repr(s)  # a SecretStr never prints


# --- gpu_memory_utilization ---------------------------------------------------

@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_gpu_memory_utilization_outside_0_to_1_is_rejected(monkeypatch, value):
    message = error_for(monkeypatch, "ERNIE_GPU_MEMORY_UTILIZATION", value)
    assert "ERNIE_GPU_MEMORY_UTILIZATION" in message
    assert repr(value) in message
    assert "greater than 0 and at most 1" in message


@pytest.mark.parametrize("value, expected", [("1.0", 1.0), ("0.5", 0.5)])
def test_gpu_memory_utilization_in_range_is_accepted(monkeypatch, value, expected):
    monkeypatch.setenv("ERNIE_GPU_MEMORY_UTILIZATION", value)
    assert load_settings().gpu_memory_utilization == expected


# --- other validators ----------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_model_len_must_be_positive(monkeypatch, value):
    message = error_for(monkeypatch, "ERNIE_MAX_MODEL_LEN", value)
    assert "ERNIE_MAX_MODEL_LEN" in message
    assert repr(value) in message
    assert "greater than 0" in message


def test_unknown_dtype_lists_the_allowed_ones(monkeypatch):
    message = error_for(monkeypatch, "ERNIE_DTYPE", "float8")
    assert "ERNIE_DTYPE" in message
    assert "'float8'" in message
    for allowed in ("auto", "bfloat16", "float16", "float32"):
        assert allowed in message


@pytest.mark.parametrize("name", ["ERNIE_ENGINE_PORT", "ERNIE_APP_PORT"])
@pytest.mark.parametrize("value, allowed", [("0", "greater than or equal to 1"),
                                            ("65536", "less than or equal to 65535")])
def test_ports_out_of_range_are_rejected(monkeypatch, name, value, allowed):
    message = error_for(monkeypatch, name, value)
    assert name in message
    assert repr(value) in message
    assert allowed in message


def test_engine_url_without_scheme_is_rejected(monkeypatch):
    message = error_for(monkeypatch, "ERNIE_ENGINE_URL", "gpu-box:8000")
    assert "ERNIE_ENGINE_URL" in message
    assert "'gpu-box:8000'" in message
    assert "http://" in message and "https://" in message


def test_engine_url_with_a_user_and_password_is_refused_without_showing_them(monkeypatch):
    message = error_for(monkeypatch, "ERNIE_ENGINE_URL", "https://probe:hunter2@gpu-box:8000/v1")
    assert "ERNIE_ENGINE_URL='https://probe:***@gpu-box:8000/v1'" in message, message
    assert "ERNIE_API_KEY" in message and "hunter2" not in message


@pytest.mark.parametrize("value", ["http://gpu-box:8000/v1", "http://gpu-box:8000/v1/",
                                   "http://gpu-box:8000/"])
def test_engine_url_is_normalised_to_the_server_root(monkeypatch, value):
    monkeypatch.setenv("ERNIE_ENGINE_URL", value)
    s = load_settings()
    assert s.engine_url == "http://gpu-box:8000"
    assert s.engine_base_url == "http://gpu-box:8000"
    assert s.starts_engine is False


@pytest.mark.parametrize("value", ["*", "https://intranet.example/chat", "intranet.example"])
def test_allowed_origins_must_be_origins_without_a_wildcard(monkeypatch, value):
    message = error_for(monkeypatch, "ERNIE_ALLOWED_ORIGINS", f"https://ok.example,{value}")
    assert f"{value!r} is not an origin" in message and "scheme://host:port" in message


def test_allowed_origins_are_kept_in_lower_case_and_empty_by_default(monkeypatch):
    assert load_settings().allowed_origins == ""
    monkeypatch.setenv("ERNIE_ALLOWED_ORIGINS", "https://Intranet.example, http://[::1]:8080,")
    assert load_settings().allowed_origins == "https://intranet.example,http://[::1]:8080"


def test_empty_engine_url_means_start_the_engine_here(monkeypatch):
    monkeypatch.setenv("ERNIE_ENGINE_URL", "")
    assert load_settings().starts_engine is True


def test_torch_index_defaults_to_pytorchs_cpu_index_and_must_be_a_url(monkeypatch):
    assert load_settings().torch_index_url == "https://download.pytorch.org/whl/cpu"
    message = error_for(monkeypatch, "ERNIE_TORCH_INDEX_URL", "download.pytorch.org/whl/cpu")
    assert "ERNIE_TORCH_INDEX_URL='download.pytorch.org/whl/cpu'" in message
    assert "http://, https:// or file://" in message


def test_extra_engine_args_with_unbalanced_quotes_are_rejected(monkeypatch):
    value = "--chat-template 'unterminated"
    message = error_for(monkeypatch, "ERNIE_EXTRA_ENGINE_ARGS", value)
    assert "ERNIE_EXTRA_ENGINE_ARGS" in message
    assert "unterminated" in message
    assert "shell quoting" in message


def test_every_bad_variable_is_reported_at_once(monkeypatch):
    monkeypatch.setenv("ERNIE_MAX_MODEL_LEN", "-5")
    monkeypatch.setenv("ERNIE_DTYPE", "int4")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "ERNIE_MAX_MODEL_LEN" in str(info.value)
    assert "ERNIE_DTYPE" in str(info.value)


def test_overrides_are_validated_like_the_environment():
    with pytest.raises(SettingsError, match="ERNIE_GPU_MEMORY_UTILIZATION"):
        load_settings(gpu_memory_utilization=2)


# --- one fast stream -------------------------------------------------------------

def test_single_stream_settings_default_to_vllms_own_choice():
    s = load_settings()
    assert (s.performance_mode, s.cudagraph_mode, s.stream_interval, s.async_scheduling,
            s.speculative_ngram, s.torch_compile, s.model_runner) == (
        "balanced", "auto", None, "auto", "off", "auto", "auto")


@pytest.mark.parametrize("value, expected", [("4", 4), ("off", "off"), ("OFF", "off"), ("16", 16)])
def test_speculative_ngram_is_off_or_a_count(monkeypatch, value, expected):
    monkeypatch.setenv("ERNIE_SPECULATIVE_NGRAM", value)
    assert load_settings().speculative_ngram == expected


@pytest.mark.parametrize("value", ["0", "17", "-2", "yes", "2.5"])
def test_speculative_ngram_out_of_range_says_what_is_allowed(monkeypatch, value):
    message = error_for(monkeypatch, "ERNIE_SPECULATIVE_NGRAM", value)
    assert f"ERNIE_SPECULATIVE_NGRAM={value!r}" in message
    assert "must be off or a whole number of draft tokens from 1 to 16" in message


@pytest.mark.parametrize("name, value, allowed", [
    ("ERNIE_PERFORMANCE_MODE", "fast", ("balanced", "interactivity", "throughput")),
    ("ERNIE_CUDAGRAPH_MODE", "full", ("auto", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")),
    ("ERNIE_ASYNC_SCHEDULING", "true", ("auto", "on", "off")),
    ("ERNIE_MODEL_RUNNER", "1", ("auto", "v1", "v2")),
    ("ERNIE_TORCH_COMPILE", "false", ("auto", "on", "off")),
])
def test_single_stream_choices_list_the_allowed_values(monkeypatch, name, value, allowed):
    message = error_for(monkeypatch, name, value)
    assert f"{name}={value!r}" in message
    assert all(f"'{a}'" in message for a in allowed)


def test_stream_interval_must_be_at_least_one(monkeypatch):
    message = error_for(monkeypatch, "ERNIE_STREAM_INTERVAL", "0")
    assert "ERNIE_STREAM_INTERVAL='0'" in message and "greater than or equal to 1" in message


@pytest.mark.parametrize("first, second, says, fixed", [
    (("ERNIE_ASYNC_SCHEDULING", "on"), ("ERNIE_SPECULATIVE_NGRAM", "3"),
     ["ERNIE_ASYNC_SCHEDULING=on and ERNIE_SPECULATIVE_NGRAM=3 cannot go together",
      "ERNIE_ASYNC_SCHEDULING=auto or off"], ("ERNIE_ASYNC_SCHEDULING", "off")),
    (("ERNIE_ENFORCE_EAGER", "true"), ("ERNIE_CUDAGRAPH_MODE", "FULL_DECODE_ONLY"),
     ["ERNIE_CUDAGRAPH_MODE=FULL_DECODE_ONLY asks for CUDA graphs",
      "ERNIE_ENFORCE_EAGER=true turns off"], ("ERNIE_CUDAGRAPH_MODE", "NONE")),
    (("ERNIE_TORCH_COMPILE", "off"), ("ERNIE_CUDAGRAPH_MODE", "FULL_AND_PIECEWISE"),
     ["ERNIE_CUDAGRAPH_MODE=FULL_AND_PIECEWISE needs the compiled model's pieces",
      "ERNIE_TORCH_COMPILE=off turns off"], ("ERNIE_CUDAGRAPH_MODE", "FULL")),
])
def test_single_stream_settings_vllm_would_refuse_together(monkeypatch, first, second, says, fixed):
    monkeypatch.setenv(*first)
    message = error_for(monkeypatch, *second)
    assert all(part in message for part in says), message
    monkeypatch.setenv(*fixed)
    load_settings()  # either one alone is fine


# --- as_env (what child processes get) ----------------------------------------

def test_as_env_round_trips_through_the_environment(monkeypatch):
    original = load_settings(model="demo", api_key="sk-x", engine_url="http://box:9000/v1",
                             enforce_eager=True, kv_cache_gib=1.5, max_num_seqs=4,
                             extra_engine_args="--seed 1 --chat-template 'a b.jinja'",
                             system_prompt="Be brief.\nAnswer in English.")
    env = original.as_env()
    assert env["ERNIE_ENFORCE_EAGER"] == "true"
    assert env["ERNIE_API_KEY"] == "sk-x"
    assert "ERNIE_MAX_NUM_BATCHED_TOKENS" not in env  # unset stays unset
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().model_dump() == original.model_dump()


# --- .env --------------------------------------------------------------------

def test_dot_env_in_the_working_directory_is_read(tmp_path):
    (tmp_path / ".env").write_text("ERNIE_MAX_MODEL_LEN=2048\nERNIE_MODEL=demo\n")
    s = load_settings()
    assert s.max_model_len == 2048
    assert s.model == "demo"


def test_environment_wins_over_dot_env(monkeypatch, tmp_path):
    (tmp_path / ".env").write_text("ERNIE_MAX_MODEL_LEN=2048\n")
    monkeypatch.setenv("ERNIE_MAX_MODEL_LEN", "1024")
    assert load_settings().max_model_len == 1024


def test_bad_value_in_dot_env_is_reported_with_its_variable(tmp_path):
    (tmp_path / ".env").write_text("ERNIE_GPU_MEMORY_UTILIZATION=95\n")
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert "ERNIE_GPU_MEMORY_UTILIZATION='95'" in str(info.value)


# --- docs ----------------------------------------------------------------------

def test_env_example_documents_exactly_the_settings_fields():
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    documented = set(re.findall(r"^#?\s*(ERNIE_[A-Z0-9_]+)=", text, flags=re.MULTILINE))
    fields = {env_name(name) for name in Settings.model_fields}
    assert fields - documented == set(), "settings missing from .env.example"
    assert documented - fields == set(), ".env.example names settings that do not exist"
    # Exactly what the command writes: descriptions and defaults too, and nothing else.
    assert text == env_example(), "regenerate: ./scripts/ernie-chat settings --env-example > .env.example"
