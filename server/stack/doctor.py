"""Explain vLLM failures found in its log, each with the fix in our settings' terms.

Every rule is a regular expression over log lines plus a function that turns
the match into a :class:`Finding`.  ``diagnose`` is pure (lines in, findings
out) so each rule is tested on real or excerpted logs; ``ernie-chat doctor``
and the supervisor only read the file and print.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from server.stack.vllm_log import START_MARKER, last_start


@dataclass(frozen=True)
class Finding:
    key: str        # stable id, used by tests and --json
    title: str
    detail: str     # what happened, with the figures from the log
    fix: str        # what to change, in ERNIE_* settings
    line_no: int    # 1-based line of the log where it was seen
    line: str

    def render(self) -> str:
        return (f"* {self.title} (log line {self.line_no})\n"
                f"    {self.detail}\n"
                f"    Fix: {self.fix}\n"
                f"    > {self.line.strip()[:300]}")


@dataclass(frozen=True)
class Rule:
    key: str
    pattern: re.Pattern
    explain: Callable[[re.Match], tuple[str, str, str]]  # -> title, detail, fix


def _cuda_oom(m: re.Match):
    return ("The GPU ran out of memory",
            "CUDA could not allocate memory while vLLM was starting or serving.",
            "lower ERNIE_GPU_MEMORY_UTILIZATION (e.g. 0.85), ERNIE_MAX_NUM_SEQS or "
            "ERNIE_MAX_NUM_BATCHED_TOKENS, or stop other programs on the GPU "
            "(`nvidia-smi` lists them). `ernie-chat plan` shows what fits.")


def _free_below_util(m: re.Match):
    free, total, util, wanted = m.group(2), m.group(3), m.group(5), m.group(6)
    return (f"Not enough free {m.group(4)} memory for the requested utilization",
            f"only {free} of {total} GiB were free at start-up, but utilization {util} "
            f"asks for {wanted} GiB.",
            f"set ERNIE_GPU_MEMORY_UTILIZATION={math.floor(float(free) / float(total) * 100) / 100:.2f} "
            "or less (free / total), or stop what else uses the device (`nvidia-smi`).")


def _max_len_too_large(m: re.Match):
    estimate = int(m.group(1))
    return ("max-model-len does not fit in the KV cache",
            f"one request of the configured length needs more KV cache than is available; "
            f"vLLM estimates the longest that fits is {estimate} tokens.",
            f"set ERNIE_MAX_MODEL_LEN={estimate} or less, or raise ERNIE_GPU_MEMORY_UTILIZATION "
            "/ ERNIE_KV_CACHE_GIB. `ernie-chat plan` computes both.")


def _no_kv_memory(m: re.Match):
    return ("No memory is left for the KV cache",
            "after weights and activations, the utilization budget leaves nothing for KV blocks.",
            "raise ERNIE_GPU_MEMORY_UTILIZATION or set ERNIE_KV_CACHE_GIB; see `ernie-chat plan`.")


def _above_model_limit(m: re.Match):
    wanted, limit = m.group(1), m.group(2)
    return ("max-model-len is above what the model supports",
            f"ERNIE_MAX_MODEL_LEN={wanted} but the model's config allows {limit} positions.",
            f"set ERNIE_MAX_MODEL_LEN={limit} or less (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "overrides it, at the risk of garbage output).")


def _model_not_found(m: re.Match):
    return ("The model could not be found or downloaded",
            "vLLM got neither a local folder with config.json nor a reachable hub repository.",
            "set ERNIE_MODEL to a folder holding config.json and the weights, check the hub "
            "id's spelling, or use ERNIE_MODEL=demo on a machine without network.")


def _unsupported_arch(m: re.Match):
    return ("The model's architecture is not supported by this vLLM",
            f"vLLM has no implementation for {m.group(1)}.",
            "use a checkpoint whose config.json names a supported architecture (ERNIE 4.5: "
            "Ernie4_5ForCausalLM, not the remote-code Ernie4_5_ForCausalLM), or upgrade vLLM.")


def _port_in_use(m: re.Match):
    return ("The engine's port is already taken",
            "another program listens on the port vLLM was asked to use.",
            "stop that program (`ss -ltnp` names it) or set ERNIE_ENGINE_PORT to a free port.")


def _cpu_attention(m: re.Match):
    return ("The CPU attention kernel rejects this model shape",
            "vLLM's CPU backend supports only some head sizes (64 and 128 work; 16 does not).",
            "serve this model on a GPU, or use a checkpoint with a supported head_dim.")


def _stray_coordinator_peer(m: re.Match):
    # Measured: an HTTP GET to a ZeroMQ XPUB port reaches vLLM's coordinator as subscription
    # messages (ZeroMQ reads a peer without its greeting as an old-protocol one); an engine
    # that subscribed and went away leaves an unsubscribe that it does not expect either.
    return ("Something other than an engine reached vLLM's data-parallel coordinator",
            "while it waited for the engine copies to subscribe, its ports got a message no "
            "engine sends: e.g. an HTTP check or port scanner on one of the ports vLLM picked, "
            "or an engine process of an earlier start that still reconnects.",
            "stop what is left of earlier starts on every machine (`pgrep -af EngineCore`), keep "
            "ERNIE_DATA_PARALLEL_ADDRESS on a network that nothing else probes, and start again.")


def _slow_prefill(m: re.Match):
    prompt_tps, waiting = float(m.group(1)), int(m.group(3))
    return ("Prefill is slow and requests are queueing",
            f"prompt throughput was {prompt_tps:.1f} tokens/s with {waiting} requests waiting.",
            "shorten prompts (ERNIE_MAX_MODEL_LEN), lower concurrency, raise "
            "ERNIE_MAX_NUM_BATCHED_TOKENS, or use a faster device; `ernie-chat bench` measures it.")


_NUM = r"([\d.]+)"
RULES: list[Rule] = [
    Rule("cuda_oom", re.compile(r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError"), _cuda_oom),
    Rule("free_memory_below_utilization",
         re.compile(r"(Free|Available) memory on (?:device|node)(?: \S+)? \(" + _NUM + "/" + _NUM
                    + r" GiB\) on startup is less than desired (GPU|CPU) memory utilization \("
                    + _NUM + ", " + _NUM + " GiB"), _free_below_util),
    Rule("max_model_len_too_large", re.compile(r"estimated maximum model length is (\d+)"),
         _max_len_too_large),
    Rule("no_kv_cache_memory", re.compile(r"No available memory for the cache blocks"), _no_kv_memory),
    Rule("max_model_len_above_model_limit",
         re.compile(r"User-specified max_model_len \((\d+)\) is greater than the derived "
                    r"max_model_len \(\w+=(\d+)"), _above_model_limit),
    Rule("model_not_found",
         re.compile(r"Invalid repository ID or local directory|Repository Not Found|"
                    r"does not appear to have a file named config\.json|"
                    r"We couldn't connect to 'https://huggingface\.co'|"
                    r"Can't load the configuration of|"
                    r"Repo id must be in the form"), _model_not_found),
    Rule("unsupported_architecture",
         re.compile(r"Model architectures (\[.*?\]) are not supported"), _unsupported_arch),
    Rule("port_in_use", re.compile(r"\[Errno 98\][^\n]*address already in use|"
                                   r"Address already in use", re.IGNORECASE), _port_in_use),
    Rule("cpu_attention_unsupported", re.compile(r"Unsupported CPU attention configuration"),
         _cpu_attention),
    Rule("dp_coordinator_stray_peer",
         re.compile(r"DP Coordinator received unexpected message while waiting for engines"),
         _stray_coordinator_peer),
    Rule("slow_prefill",
         re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: "
                    r"([\d.]+) tokens/s, Running: \d+ reqs, Waiting: (\d+) reqs"), _slow_prefill),
]

# Failures of the settings or the model: restarting the engine unchanged cannot help.
NOT_FIXED_BY_RESTART = {
    "max_model_len_too_large", "no_kv_cache_memory", "max_model_len_above_model_limit",
    "model_not_found", "unsupported_architecture", "port_in_use", "cpu_attention_unsupported",
    "free_memory_below_utilization",
}

# Slow prefill is only worth a finding when requests wait for a prompt rate this low.
SLOW_PREFILL_TOKENS_PER_S = 200.0
SLOW_PREFILL_MIN_WAITING = 4


def _keep(rule: Rule, match: re.Match) -> bool:
    if rule.key == "slow_prefill":
        prompt_tps, waiting = float(match.group(1)), int(match.group(3))
        return 0 < prompt_tps < SLOW_PREFILL_TOKENS_PER_S and waiting >= SLOW_PREFILL_MIN_WAITING
    return True


def diagnose(lines: Iterable[str], since_last_start: bool = False) -> list[Finding]:
    """Findings in log order, each rule reported once (at its last occurrence).

    With ``since_last_start`` only the lines after the last engine start count,
    so an old failure in an appended log does not explain a new one.
    """
    lines = list(lines)
    offset = last_start(lines) if since_last_start else 0
    lines = lines[offset:]
    found: dict[str, Finding] = {}
    for index, line in enumerate(lines):
        for rule in RULES:
            match = rule.pattern.search(line)
            if match and _keep(rule, match):
                title, detail, fix = rule.explain(match)
                found[rule.key] = Finding(rule.key, title, detail, fix, offset + index + 1, line)
    return sorted(found.values(), key=lambda f: f.line_no)


# vLLM prefixes its lines with the process, e.g. "(EngineCore_DP0 pid=253) ".
_PROCESS = r"^\s*(?:\(\w+ pid=\d+\)\s*)?"
_PYTHON_ERROR = re.compile(_PROCESS + r"(\w+\.)*\w*(Error|Exception)\b")
_LOGGED_ERROR = re.compile(_PROCESS + r"ERROR \d\d-\d\d ")


def last_error_lines(lines: list[str], count: int = 8) -> list[str]:
    """The tail worth showing when no rule matched: Python's last error, else the end.

    vLLM's last error often only says "See root cause above" while the cause is the first
    ERROR another process logged (e.g. its data-parallel coordinator); that line leads.
    """
    first = next((i for i in range(last_start(lines), len(lines))
                  if _LOGGED_ERROR.match(lines[i])), None)
    tail = lines[-count:]
    for index in range(len(lines) - 1, -1, -1):
        if _PYTHON_ERROR.match(lines[index]):
            tail = lines[max(0, index - count + 1): index + 1]
            break
    if first is not None and lines[first] not in tail:
        return [lines[first], "..."] + tail
    return tail


def explain(lines: list[str], since_last_start: bool = True) -> Optional[str]:
    findings = diagnose(lines, since_last_start=since_last_start)
    if not findings:
        return None
    return "\n".join(f.render() for f in findings)
