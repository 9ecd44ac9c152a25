"""All configuration of the stack, in one pydantic-settings class.

Every field is read from an environment variable named ``ERNIE_<FIELD>`` (for
example ``ERNIE_MAX_MODEL_LEN``) or from the ``.env`` file in the working
directory; ``.env.example`` documents each one.  The supervisor, the CLI and
the chat app all load the same class, so a value means the same thing
everywhere.  Bad values stop start-up with :class:`SettingsError`, whose text
names the variable, the value and what is allowed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from server import settings_rules as rules
from server import settings_text
from server.errors import ErnieChatError
from server.settings_text import ENV_PREFIX, env_name

DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
# The word that asks for the built-in demo model instead of a checkpoint.
DEMO_MODEL = "demo"
# Without an explicit size vLLM-CPU takes gpu_memory_utilization x the machine's
# RAM (about 20 GiB on a 24 GiB machine) for its KV pool; on CPU we always size it.
DEFAULT_CPU_KV_GIB = 1.0
# A chat's next message comes after its reader's pause (capacity's users think 5 s on
# average): a connection kept that long spares the app and the engine a new one per message.
OWN_ENGINE_KEEPALIVE_S = 60.0
# vLLM's own limit is 5 s; letting go at 2 s kept the app's requests off a closing
# connection (docs/notes.md, "Keep-alive race").
OTHER_ENGINE_KEEPALIVE_S = 2.0
KEEPALIVE_MARGIN_S = 15.0


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
    engine_url: Annotated[Optional[str], BeforeValidator(rules.engine_url)] = Field(
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
    torch_index_url: Annotated[str, AfterValidator(rules.index_url)] = Field(
        "https://download.pytorch.org/whl/cpu",
        description="Package index (PEP 503) the CPU build of torch is installed from when "
        "the indexes pip is configured with do not have it (PyPI does not).",
    )
    log_file: Path = Field(Path("llm.log"), description="vLLM's output is appended here.")

    # --- KV cache and batching --------------------------------------------
    max_model_len: int = Field(
        8192, gt=0, description="Longest request (prompt + reply) in tokens: --max-model-len."
    )
    gpu_memory_utilization: Annotated[float, AfterValidator(rules.utilization)] = Field(
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
    extra_engine_args: Annotated[str, AfterValidator(rules.shell_words)] = Field(
        "", description="More vLLM flags, shell-quoted, appended as they are."
    )
    startup_timeout_s: float = Field(
        900, gt=0, description="Give up when vLLM is not ready after this many seconds."
    )
    max_restarts: int = Field(
        5, ge=0, description="Engine restarts after crashes before the supervisor gives up."
    )

    # --- scale: processes of each tier ------------------------------------
    api_servers: Optional[int] = Field(
        None, ge=1, le=64,
        description="vLLM API server processes per engine copy (--api-server-count). Unset: "
        "chosen from the machine (1 on a CPU machine; on a GPU machine a quarter of the cores, "
        "at most 4). One API server process is the limit of a small model on a big GPU.",
    )
    engine_copies: int = Field(
        1, ge=1, le=16,
        description="Copies of the engine on each GPU, each with its share of the memory, behind "
        "one balancer (HAProxy). One engine core process cannot keep a big GPU busy with a model "
        "this small; `ernie-chat plan` shows each copy's KV pool.",
    )
    app_workers: Optional[int] = Field(
        None, ge=1, le=64,
        description="Chainlit worker processes behind one balancer (HAProxy). Unset: chosen from "
        "the machine (1 on a CPU machine; on a GPU machine half the cores, at most 8). "
        "One worker streams about 10k tokens/s.",
    )
    warmup: bool = Field(
        True, description="Before the chat URL is printed, send the engine requests like the "
        "app's (streaming, its sampling settings, /tokenize), so the first users do not pay for "
        "run-time compilation.",
    )
    engine_process_start: Literal["auto", "fork", "spawn"] = Field(
        "auto",
        description="How vLLM starts its engine core and API server processes "
        "(VLLM_WORKER_MULTIPROC_METHOD). fork inherits the first process's imports instead of "
        "importing vLLM again in each; auto: fork on a GPU, spawn on a CPU (where the CPU build "
        "spawns its engine core anyway).",
    )

    # --- several GPUs and machines: vLLM's data parallelism -----------------
    data_parallel_size: int = Field(
        1, ge=1, le=1024,
        description="Engine copies on GPUs of this and other machines, in one vLLM server whose "
        "API servers spread the requests (--data-parallel-size). Each GPU holds ERNIE_ENGINE_COPIES "
        "such servers.",
    )
    data_parallel_size_local: Optional[int] = Field(
        None, ge=1, le=64,
        description="Of those, the copies on this machine, one per GPU (--data-parallel-size-local). "
        "Unset: all of them (one machine).",
    )
    data_parallel_address: Optional[str] = Field(
        None, description="Address of the head machine that the other machines' engine copies "
        "connect to (--data-parallel-address); it must be reachable from them.",
    )
    data_parallel_rpc_port: int = Field(
        29550, ge=1, le=65535,
        description="Port on the head for the engine copies of other machines "
        "(--data-parallel-rpc-port; the Nth copy per GPU uses this port + N). Open it to those "
        "machines only: vLLM does not authenticate it.",
    )
    node_role: Literal["head", "engines"] = Field(
        "head", description="head: API servers, balancer and chat (and engine copies). engines: "
        "only engine copies for a head elsewhere (vllm serve --headless), no chat.",
    )
    data_parallel_start_rank: Optional[int] = Field(
        None, ge=0, description="On an engines machine: the rank of its first copy "
        "(--data-parallel-start-rank), i.e. how many copies the machines before it run.",
    )

    # --- one fast stream: vLLM's scheduling and CUDA graphs ----------------------------
    # Each default passes no flag, so vLLM keeps its own choice (docs/notes.md, "Settings
    # for one fast stream").
    performance_mode: Literal["balanced", "interactivity", "throughput"] = Field(
        "balanced",
        description="vLLM's --performance-mode: interactivity favours one stream's latency (finer "
        "CUDA graphs, latency kernels), throughput the total tokens/s of many; balanced is "
        "vLLM's default and passes nothing.",
    )
    cudagraph_mode: Literal["auto", "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                            "FULL_AND_PIECEWISE"] = Field(
        "auto",
        description="GPU only: which CUDA graphs vLLM captures (-cc.cudagraph_mode); auto keeps "
        "vLLM's choice. FULL_DECODE_ONLY captures decode graphs only (a shorter start).",
    )
    torch_compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="vLLM compiles the model with torch.compile at start (auto and on: vLLM's "
        "choice; its cache makes later starts of the same configuration quick). GPU only: off "
        "passes -cc.mode=0, a start ~10 s shorter and the same speed for one stream, but less "
        "for a crowd; CUDA graphs are then whole-step ones only (auto graphs become "
        "FULL_DECODE_ONLY). Refused on a CPU, where vLLM's worker then dies on a one-token prompt.",
    )
    model_runner: Literal["auto", "v1", "v2"] = Field(
        "auto",
        description="Which of vLLM's model runners prepares each step (VLLM_USE_V2_MODEL_RUNNER); "
        "auto keeps vLLM's choice (v2 for this model in vLLM 0.26).",
    )
    stream_interval: Optional[int] = Field(
        None,
        ge=1,
        description="Tokens vLLM gathers before it sends them on a stream (--stream-interval; "
        "unset: vLLM's 1, every token at once). More means less work for the API server per "
        "token and a less smooth stream.",
    )
    engine_stats: bool = Field(
        True,
        description="vLLM's statistics of every step (its /metrics, the live view's engine "
        "figures, its log's throughput lines); false passes --disable-log-stats, less work per "
        "step for one fast stream, and /metrics and /status then show no engine figures.",
    )
    async_scheduling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="vLLM's async scheduling (--async-scheduling / --no-async-scheduling); auto "
        "lets vLLM decide (it turns it off with n-gram speculation, and on a CPU).",
    )
    speculative_ngram: Annotated[Literal["off"] | int, BeforeValidator(rules.ngram_draft_tokens)] = Field(
        "off",
        description="n-gram speculative decoding: off, or the number of draft tokens (1-16) "
        "vLLM proposes from text already in the request (--speculative-config, method ngram). "
        "Pays off only when replies repeat their context; turns async scheduling off.",
    )

    # --- the chat app ------------------------------------------------------
    app_host: str = Field("127.0.0.1", description="Address the Chainlit app listens on.")
    app_port: int = Field(8080, ge=1, le=65535, description="Port the Chainlit app listens on.")
    open_chat: bool = Field(False, description="Let an exposed chat (ERNIE_APP_HOST not loopback) run "
                            "without login (ERNIE_USERS): anyone who reaches its port can chat.")
    connections_per_client: int = Field(64, ge=0, description="Most connections at once from one "
                                        "address to an exposed chat or engine (generous: an office "
                                        "shares one address; 0: no limit).")
    system_prompt: str = Field(
        "You are a helpful assistant.", description="Default system prompt of new chats."
    )
    temperature: float = Field(0.7, ge=0, le=2, description="Default sampling temperature.")
    top_p: float = Field(0.9, gt=0, le=1, description="Default nucleus sampling top_p.")
    max_tokens: int = Field(512, ge=1, description="Default longest reply, in tokens.")
    chat_db: Annotated[Optional[str], BeforeValidator(rules.chat_db)] = Field(
        None,
        description="Saved chats: a SQLite file (data/chats.db), or a PostgreSQL URL "
        "(postgresql://user:password@host:5432/chats) that several app workers or machines "
        "share. Turns on login and the chat history sidebar; needs ERNIE_USERS.",
    )
    users: Annotated[Optional[SecretStr], AfterValidator(rules.user_pairs)] = Field(
        None,
        description="Who may log in: name:secret pairs, comma-separated. The secret is best the "
        "bcrypt hash `ernie-chat hash-password` prints (alice:$2b$12$...; single-quote it in a "
        "shell); a plain password works but every start warns about it.",
    )
    login_delay_base_s: float = Field(
        1.0, gt=0, description="Wait before the next login attempt once a key (a user from one address "
        "or device; an address) used its free failures; it doubles with each further failure.")
    login_delay_max_s: float = Field(
        30.0, gt=0, description="Longest wait between two login attempts on one key; past a queue this "
        "long they get 429. A user's known browser is never held up by guessing elsewhere.")
    login_delay_half_life_s: float = Field(
        600.0, gt=0, description="Failed logins are forgotten gradually: their count halves every this "
        "many seconds. A success clears only that user's own count there, never an address's.")
    auth_db: Path = Field(
        Path("data/auth.db"), description="SQLite file (mode 0600) the app workers share for login "
        "counts and sign-outs, kept across restarts; with a PostgreSQL ERNIE_CHAT_DB, that instead.")
    session_lifetime_s: int = Field(15 * 24 * 3600, ge=60, description="How long a login lasts unless "
        "ended: logout, a new password or removal in ERNIE_USERS, `ernie-chat revoke-sessions NAME`.")
    context_window: Optional[int] = Field(
        None, gt=0, description="Context window (tokens) of an OpenAI-compatible server that does "
        "not report one (vLLM and llama.cpp do); unset: ERNIE_MAX_MODEL_LEN.",
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
    engine_keepalive_s: Optional[float] = Field(
        None, gt=0, le=3600, description="Seconds the app keeps an idle connection to the engine "
        "for the next message. It must stay under the engine's own limit (vLLM closes an idle "
        "connection after 5 s unless VLLM_HTTP_TIMEOUT_KEEP_ALIVE says otherwise). Unset: 60 for "
        "the engine `up` starts, whose limit it sets 15 s higher, and 2 for one elsewhere "
        "(ERNIE_ENGINE_URL).",
    )

    allowed_origins: Annotated[str, AfterValidator(rules.origins)] = Field(
        "", description="Other web origins (scheme://host:port, comma-separated) whose pages may use "
        "the chat with the user's cookies (CORS, its socket). Empty: only the chat's own origin.")
    pdf_max_pages: int = Field(300, ge=1, description="An attached PDF with more pages is refused unread.")
    pdf_memory_mb: int = Field(512, ge=128, description="Memory (MiB) of the child process that reads "
                               "an attached PDF; a PDF that needs more is refused.")
    pdf_timeout_s: float = Field(20, gt=0, description="Seconds the child process may take to read an "
                                 "attached PDF; a slower one is stopped and refused.")

    @model_validator(mode="after")
    def _settings_agree(self) -> "Settings":
        if problems := rules.disagreements(self):
            raise ValueError("; ".join(problems))
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
    def app_keepalive_s(self) -> float:
        """engine_keepalive_s, or its default: an engine elsewhere may keep vLLM's 5 s."""
        if self.engine_keepalive_s is not None:
            return self.engine_keepalive_s
        return OWN_ENGINE_KEEPALIVE_S if self.starts_engine else OTHER_ENGINE_KEEPALIVE_S

    @property
    def engine_keepalive_limit_s(self) -> int:
        """VLLM_HTTP_TIMEOUT_KEEP_ALIVE for the engine ``up`` starts: the app lets an idle
        connection go well before the engine would close it, never racing its close."""
        return math.ceil(self.app_keepalive_s + KEEPALIVE_MARGIN_S)

    @property
    def cpu_kv_cache_gib(self) -> float:
        """The KV pool on a CPU, where it is always sized explicitly (--kv-cache-memory-bytes)."""
        return self.kv_cache_gib if self.kv_cache_gib is not None else DEFAULT_CPU_KV_GIB

    @property
    def engine_base_url(self) -> str:
        """URL clients use to reach the engine (never the 0.0.0.0 wildcard)."""
        return self.engine_url or rules.client_url(self.engine_host, self.engine_port)

    @property
    def app_url(self) -> str:
        return rules.client_url(self.app_host, self.app_port)

    @property
    def api_key_value(self) -> Optional[str]:
        return self.api_key.get_secret_value() if self.api_key else None

    def as_env(self) -> dict[str, str]:
        """These settings as ERNIE_* variables, so a child process sees exactly these values."""
        return {env_name(name): settings_text.env_value(getattr(self, name))
                for name in type(self).model_fields if getattr(self, name) is not None}


# chat_db: a PostgreSQL URL carries a password.
SECRET_FIELDS = {"api_key", "users", "chat_db"}


def auth_headers(api_key: Optional[str]) -> dict:
    """The header vLLM's --api-key / VLLM_API_KEY asks every client for."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def load_settings(**overrides) -> Settings:
    """Load and validate settings, turning pydantic's errors into a readable message."""
    if report := settings_text.env_file_report(Path(Settings.model_config["env_file"])):
        raise SettingsError(report)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError(settings_text.describe_errors(exc, Settings.model_fields, SECRET_FIELDS)) from None


def env_example() -> str:
    """The text of .env.example: every setting with its meaning and default."""
    return settings_text.env_example(Settings.model_fields)
