"""The container files as text: what no build on this machine can show for the GPU image (its
base is vLLM's CUDA image), and what both images and compose.yaml must keep.
tests/deploy/test_containers.py builds and runs the CPU image and compose.yaml for real."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

from server.paths import ROOT
from server.settings import Settings
from server.stack.engine_env import pinned
from server.stack.platforms import GPU_REQUIREMENTS
from tests.support.containers import CONTAINERFILE, instructions

GPU_FILE = ROOT / "deploy" / "Containerfile.gpu"
STATE = ["/opt/ernie-chat/data", "/opt/ernie-chat/run", "/opt/ernie-chat/.cache", "/home/ernie/.cache"]


def test_the_gpu_image_is_vllms_own_image_of_the_pinned_vllm():
    parsed = instructions(GPU_FILE)
    version = pinned((ROOT / GPU_REQUIREMENTS).read_text(), "vllm").split("==")[1]
    assert parsed[0] == ("ARG", f"VLLM_TAG=v{version}")
    assert parsed[1] == ("FROM", "docker.io/vllm/vllm-openai:${VLLM_TAG}")
    # The image's vLLM is the engine's: no index while its environment is set up.
    engine_step = next(args for word, args in parsed if word == "RUN" and "server.stack.engine_env" in args)
    assert "--system-site-packages" in engine_step and "PIP_NO_INDEX=1" in engine_step
    assert "ERNIE_DEVICE=cuda" in dict(parsed)["ENV"]  # no GPU while the image builds


@pytest.mark.parametrize("path", [CONTAINERFILE, GPU_FILE], ids=lambda p: p.name)
def test_each_image_runs_up_as_pid_1_unprivileged_with_its_state_in_volumes(path):
    parsed = instructions(path)
    words = [word for word, _ in parsed]
    assert dict(parsed)["ENTRYPOINT"] == '["/opt/ernie-chat/scripts/up"]'
    user = words.index("USER")
    assert dict(parsed)["USER"] not in ("root", "0")
    # Nothing is installed once the user runs: no apt (nor pip) at run time.
    assert not any("apt-get" in args or "pip" in args for word, args in parsed[user:] if word == "RUN")
    assert [word for word in words[user:] if word in ("RUN", "COPY", "ADD")] == []
    volumes = dict(parsed)["VOLUME"]
    assert all(f'"{folder}"' in volumes for folder in STATE), volumes
    assert "server.stack.health" in dict(parsed)["HEALTHCHECK"]
    assert dict(parsed)["STOPSIGNAL"] == "SIGTERM"


def imported_files(module: str) -> set[Path]:
    """``module``'s file and those of every module of the project it imports, itself or through
    others (import-linter's own graph), with their packages' ``__init__.py``: what must be in the
    image for it to run."""
    files = set()
    for name in {module, *grimp.build_graph("server", cache_dir=None).find_upstream_modules(module)}:
        parts = name.split(".")
        files |= {ROOT.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))}
        path = ROOT.joinpath(*parts)
        files.add(path / "__init__.py" if path.is_dir() else path.with_suffix(".py"))
    return files


@pytest.mark.parametrize("path", [CONTAINERFILE, GPU_FILE], ids=lambda p: p.name)
def test_the_engine_layer_holds_the_engine_module_and_all_it_imports_and_nothing_more(path):
    """A file missing fails the build (ImportError); one too many reinstalls vLLM whenever it
    changes."""
    parsed = instructions(path)
    engine_step = next(i for i, (word, args) in enumerate(parsed)
                       if word == "RUN" and "-m server.stack.engine_env" in args)
    copied = set()
    for word, args in parsed[:engine_step]:
        if word == "COPY" and args.split()[-1].startswith("server/"):
            *sources, target = args.split()
            assert all(Path(source).parent == Path(target) for source in sources), args  # COPY flattens
            copied |= {ROOT / source for source in sources}
    assert copied == imported_files("server.stack.engine_env")


def test_the_cpu_images_torch_index_is_the_settings_default():
    default = Settings.model_fields["torch_index_url"].default
    assert ("ARG", f"ERNIE_TORCH_INDEX_URL={default}") in instructions(CONTAINERFILE)


def test_compose_defaults_to_an_exposed_chat_with_a_login_and_https():
    text = (ROOT / "compose.yaml").read_text()
    assert re.search(r"^\s+ERNIE_APP_HOST: 0\.0\.0\.0$", text, re.M)
    assert re.search(r"^\s+ERNIE_USERS: \$\{ERNIE_USERS:\?", text, re.M)  # compose refuses without one
    assert re.search(r"^\s+ERNIE_TLS: \$\{ERNIE_TLS:-auto\}$", text, re.M)
    assert re.search(r"^\s+stop_grace_period: 2m$", text, re.M)
    assert all(re.search(rf"^\s+- \w+:{re.escape(folder)}$", text, re.M) for folder in STATE)
    gpu = (ROOT / "compose.gpu.yaml").read_text()
    assert "dockerfile: deploy/Containerfile.gpu" in gpu and "driver: nvidia" in gpu


@pytest.mark.usefixtures("clean_env")
def test_the_health_check_fails_where_no_chat_answers(monkeypatch, capsys):
    from server.stack import health
    from server.stack.processes import free_port
    port = free_port()
    monkeypatch.setenv("ERNIE_APP_PORT", str(port))
    assert health.main() == 1
    assert f"the chat at http://127.0.0.1:{port} does not answer 200" in capsys.readouterr().err
