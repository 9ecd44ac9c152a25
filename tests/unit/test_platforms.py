"""Which machines get which engine: the pure decision for each case, and the refusal on a
machine no vLLM installs on, which must leave nothing behind (server/stack/platforms.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from server.stack import engine_env, platforms, provision
from server.stack.platforms import EngineUnsupported, engine_requirements, why_no_vllm
from server.paths import ROOT
from server.settings import load_settings
from tests.support.pythons import interpreter


@pytest.mark.parametrize("system, machine, python, device, pins", [
    ("Linux", "x86_64", (3, 11), "cpu", "requirements/engine-cpu.txt"),
    ("Linux", "x86_64", (3, 13), "cpu", "requirements/engine-cpu.txt"),
    ("Linux", "aarch64", (3, 11), "cpu", "requirements/engine-cpu-aarch64.txt"),
    ("Linux", "arm64", (3, 12), "cpu", "requirements/engine-cpu-aarch64.txt"),
    ("Linux", "x86_64", (3, 11), "cuda", "requirements/engine-gpu.txt"),
    ("Linux", "aarch64", (3, 12), "cuda", "requirements/engine-gpu.txt"),
])
def test_linux_on_x86_64_and_aarch64_gets_its_pin_file(system, machine, python, device, pins):
    assert engine_requirements(system, machine, python, device) == pins
    assert (ROOT / pins).is_file()


@pytest.mark.parametrize("system, machine, python, device, reason", [
    ("Darwin", "arm64", (3, 12), "cpu", "no build for macOS"),
    ("Darwin", "x86_64", (3, 11), "cpu", "no build for macOS"),
    ("Windows", "AMD64", (3, 11), "cpu", "Linux only, and this is Windows"),
    ("FreeBSD", "amd64", (3, 11), "cpu", "Linux only, and this is FreeBSD"),
    ("Linux", "ppc64le", (3, 11), "cpu", "x86_64 and aarch64 only, and this machine is ppc64le"),
    ("Linux", "riscv64", (3, 11), "cuda", "x86_64 and aarch64 only, and this machine is riscv64"),
    ("Linux", "armv7l", (3, 11), "cpu", "x86_64 and aarch64 only, and this machine is armv7l"),
    ("Linux", "x86_64", (3, 10), "cpu", "Python 3.11 to 3.14, and the engine would run on Python 3.10"),
    ("Linux", "aarch64", (3, 15), "cpu", "Python 3.11 to 3.14, and the engine would run on Python 3.15"),
])
def test_machines_without_a_vllm_build_are_refused_with_the_reason(system, machine, python, device, reason):
    assert reason in why_no_vllm(system, machine, python, device)
    with pytest.raises(EngineUnsupported) as info:
        engine_requirements(system, machine, python, device)
    assert reason in str(info.value)


def test_the_refusal_is_one_sentence_then_the_commands_that_work_there():
    message = platforms.unsupported_message(why_no_vllm("Darwin", "arm64", (3, 12), "cpu"))
    first, *rest = message.splitlines()
    assert first.startswith("vLLM cannot be installed on this machine: ") and first.endswith(".")
    assert first.count(". ") == 0
    commands = [line.strip() for line in rest]
    assert "ERNIE_ENGINE_URL=http://gpu-box:8000 ./scripts/up" in commands
    assert "ollama serve" in commands
    assert "ERNIE_ENGINE_URL=http://127.0.0.1:11434 ./scripts/up" in commands
    assert any(c.startswith("llama-server -m model.gguf --host 127.0.0.1 --port 8000") for c in commands)
    assert "ERNIE_ENGINE_URL=http://127.0.0.1:8000 ./scripts/up" in commands


def test_on_a_mac_up_refuses_before_creating_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_env.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(engine_env.platform, "machine", lambda: "arm64")
    venv = tmp_path / ".venv-engine"
    with pytest.raises(EngineUnsupported) as info:
        engine_env.ensure_engine_env(venv, "cpu", ROOT, "https://download.pytorch.org/whl/cpu")
    assert "ollama serve" in str(info.value)
    assert not venv.exists()
    assert info.value.render().startswith("ERROR: vLLM cannot be installed on this machine")


@pytest.mark.parametrize("candidates, picked", [
    ([("/app/python", (3, 11))], ("/app/python", (3, 11))),
    # The app on 3.12 and a 3.11 on PATH: the engine takes 3.11, for which torch is local here.
    ([("/app/python", (3, 12)), ("/usr/bin/python3.11", (3, 11))], ("/usr/bin/python3.11", (3, 11))),
    # python3.11 is a shim that does not run: the app's own Python.
    ([("/app/python", (3, 13)), ("/shims/python3.11", None)], ("/app/python", (3, 13))),
])
def test_the_engine_prefers_python_3_11(candidates, picked):
    assert engine_env.pick_engine_python(candidates) == picked


def test_the_torch_pin_is_read_from_each_cpu_pin_file():
    for pins in platforms.CPU_REQUIREMENTS.values():
        assert engine_env.pinned((ROOT / pins).read_text(), "torch") == "torch==2.13.0+cpu"
    assert engine_env.pinned((ROOT / platforms.GPU_REQUIREMENTS).read_text(), "torch") is None
    assert engine_env.pinned("# torch==1.0 in a comment\nTorch==2.0 # pinned\n", "torch") == "Torch==2.0"


# --- scripts/lib.sh: which Python the app environment is created with ---------

def find_python(tmp_path: Path, on_path: dict[str, Path], ernie_python: str = "") -> subprocess.CompletedProcess:
    """find_python with a PATH that holds only ``on_path`` (name -> interpreter) and dirname."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to("/usr/bin/dirname")
    for name, target in on_path.items():
        (bin_dir / name).symlink_to(target)
    script = f'source "{ROOT}/scripts/lib.sh"; find_python'
    return subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bin_dir), "ERNIE_PYTHON": ernie_python})


def test_find_python_takes_3_12_when_python3_is_3_10(tmp_path):
    done = find_python(tmp_path, {"python3": interpreter("3.10"), "python3.12": interpreter("3.12")})
    assert (done.returncode, done.stdout.strip()) == (0, "python3.12")


def test_find_python_refuses_3_10_with_what_to_do(tmp_path):
    done = find_python(tmp_path, {"python3": interpreter("3.10")})
    assert done.returncode == 1
    assert "Python 3.11 or newer is needed" in done.stderr and "ERNIE_PYTHON" in done.stderr


def test_find_python_refuses_an_ernie_python_below_3_11(tmp_path):
    old = interpreter("3.10")
    done = find_python(tmp_path, {"python3.11": interpreter("3.11")}, ernie_python=str(old))
    assert done.returncode == 1
    assert f"ERNIE_PYTHON={old} is not a Python 3.11 or newer" in done.stderr


@pytest.mark.usefixtures("clean_env")
def test_prepare_builds_the_engine_env_and_only_the_demo_models_served(tmp_path, monkeypatch):
    """`ernie-chat prepare`: each demo model of ERNIE_MODELS in its size, a local checkpoint left."""
    local = tmp_path / "my-model"
    local.mkdir()
    built = []
    monkeypatch.setattr(provision, "ensure_engine_env", lambda venv, device, root, index: Path("/engine/python"))
    monkeypatch.setattr(provision, "ensure_demo_model",
                        lambda folder, python, root, size: built.append((folder.name, str(python), size)))
    settings = load_settings(models=f"demo,demo-small,{local}", demo_model_dir=tmp_path / "demo")
    assert provision.prepare_all(settings, "cpu", tmp_path) == Path("/engine/python")
    assert built == [("demo", "/engine/python", "default"), ("demo-small", "/engine/python", "small")]
