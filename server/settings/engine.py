"""The engine: vLLM started here (where, with which environment and flags) or one elsewhere."""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import urlsplit
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, SecretStr

from server.settings.network import api_root, client_url


def checked_engine_url(value: Optional[str]) -> Optional[str]:
    if value in (None, ""):
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https:// (e.g. http://127.0.0.1:8000)")
    # A user and password in the URL would be shown wherever the URL is (the welcome, /status,
    # the live page, errors), and the chat's clients cannot send them beside the API key.
    if "@" in urlsplit(value).netloc:
        raise ValueError("holds a user or password (user:password@): leave them out and give the "
                         "server's key in ERNIE_API_KEY instead (sent as a bearer token)")
    return api_root(value)


def checked_index_url(value: str) -> str:
    if not value.startswith(("http://", "https://", "file://")):
        raise ValueError("must be a package index URL starting with http://, https:// or "
                         "file:// (e.g. https://download.pytorch.org/whl/cpu)")
    return value


def checked_shell_words(value: str) -> str:
    try:
        shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"is not valid shell quoting ({exc})") from exc
    return value


class EngineSettings(BaseModel):
    engine_url: Annotated[Optional[str], BeforeValidator(checked_engine_url)] = Field(
        None,
        description="Use an OpenAI-compatible server that is already running (e.g. "
        "http://gpu-box:8000) instead of starting vLLM here.",
    )
    engine_host: str = Field("127.0.0.1", description="Address vLLM listens on.")
    engine_port: int = Field(8000, ge=1, le=65535, description="Port vLLM listens on.")
    api_key: Optional[SecretStr] = Field(None, description="API key the engine asks for and the app "
                                         "sends; made when vLLM is exposed and none is set.")
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="auto picks cuda when an NVIDIA GPU is present, else cpu."
    )
    engine_venv: Path = Field(Path(".venv-engine"), description="The engine's own environment.")
    torch_index_url: Annotated[str, AfterValidator(checked_index_url)] = Field(
        "https://download.pytorch.org/whl/cpu",
        description="Package index (PEP 503) the CPU build of torch is installed from when "
        "the indexes pip is configured with do not have it (PyPI does not).",
    )
    log_file: Path = Field(
        Path("run/llm.log"),
        description="vLLM's output is appended here. Its folder is the run folder: every log and the "
        "running stack's state files go there, all of it safe to lose between runs (what must be "
        "kept is in data/).")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="Weight and activation dtype: --dtype."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per model: -tp.")
    enforce_eager: bool = Field(False, description="Skip CUDA graphs (slower decode, faster start).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV of shared prompt prefixes.")
    extra_engine_args: Annotated[str, AfterValidator(checked_shell_words)] = Field(
        "", description="More vLLM flags, shell-quoted, appended as they are."
    )
    startup_timeout_s: float = Field(
        900, gt=0, description="Give up when vLLM is not ready after this many seconds."
    )
    max_restarts: int = Field(
        5, ge=0, description="Engine restarts after crashes before the supervisor gives up."
    )

    def problems(self) -> list[str]:
        return []

    @property
    def starts_engine(self) -> bool:
        """False when the user points the app at a server that runs elsewhere."""
        return self.engine_url is None

    @property
    def engine_base_url(self) -> str:
        """URL clients use to reach the engine (never the 0.0.0.0 wildcard)."""
        return self.engine_url or client_url(self.engine_host, self.engine_port)

    @property
    def api_key_value(self) -> Optional[str]:
        return self.api_key.get_secret_value() if self.api_key else None
