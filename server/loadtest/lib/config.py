"""What a load test sends: the load, the target, the prompts' lengths (pure, no I/O).

``Load`` and ``BenchConfig`` are what ``bench`` and ``tune`` share: tune runs
the same load at every point of its sweep.  The length functions draw (prompt,
reply) token counts as vLLM's random dataset does, or from the app's usage log.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from server.errors import LoadTestError
from server.loadtest.lib.stats import Slo


class BenchError(LoadTestError):
    """A problem the person running the bench can fix; the message says how."""


@dataclass(frozen=True)
class Load:
    """What is sent: how many requests and how long their prompts and replies are."""

    num_prompts: int = 50
    input_len: int = 256
    output_len: int = 128
    range_ratio: float = 0.0
    from_usage: Optional[Path] = None  # sample (prompt, reply) lengths from the app's usage log
    seed: int = 0


@dataclass(frozen=True)
class BenchConfig:
    url: str
    api_key: Optional[str] = None
    api_key_from: str = ""  # where the key came from (server/engine_key.py), for a refusal's message
    model: Optional[str] = None  # served model name; None: the server's first model
    concurrencies: tuple[int, ...] = (4,)
    load: Load = field(default_factory=Load)
    ignore_eos: bool = True
    max_seconds: float = 600.0
    request_timeout_s: float = 300.0
    warmup: int = 1
    temperature: Optional[float] = None  # None: the server's default, as vllm bench serve
    top_p: Optional[float] = None
    slo: Slo = field(default_factory=Slo)
    processes: int = 1  # client processes a level's requests are shared over (``bench.processes``)
    # Open loop (bench --request-rate, ``lib.arrivals``): requests arrive at this rate whatever
    # the server's pace; inf: the closed loop. Uncapped: no --concurrency was given, so nothing
    # limits the requests in flight (each level's "concurrency" is then its number of prompts).
    request_rate: float = math.inf
    burstiness: float = 1.0
    uncapped: bool = False

    @property
    def open_loop(self) -> bool:
        return self.request_rate != math.inf

    @property
    def sampling(self) -> dict:
        """The sampling fields to send: those given; the server's defaults for the rest.
        top_p makes vLLM run a top-p kernel every step (the chat app sends 0.9)."""
        asked = {"temperature": self.temperature, "top_p": self.top_p}
        return {name: value for name, value in asked.items() if value is not None}

    def as_dict(self) -> dict:
        out = asdict(self)
        out["api_key"] = "<set>" if self.api_key else None  # results are shared; keys are not
        out["load"]["from_usage"] = str(self.load.from_usage) if self.load.from_usage else None
        out["open_loop"] = self.open_loop
        out["request_rate"] = self.request_rate if self.open_loop else None  # JSON has no inf
        out["burstiness"] = None if not self.open_loop else (
            self.burstiness if self.burstiness != math.inf else "inf")
        return out


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_tokens: int  # exact when counted by the server's tokenizer
    max_tokens: int


# --- lengths (pure) -------------------------------------------------------------

def length_range(mean: int, ratio: float) -> tuple[int, int]:
    """Inclusive bounds of a length drawn around ``mean``, as vLLM's --random-range-ratio."""
    return max(1, math.floor(mean * (1 - ratio))), max(1, math.ceil(mean * (1 + ratio)))


def sample_lengths(n: int, input_len: int, output_len: int, ratio: float,
                   rng: random.Random) -> list[tuple[int, int]]:
    """(prompt tokens, reply tokens) for ``n`` requests: fixed, or uniform in the range."""
    low_in, high_in = length_range(input_len, ratio)
    low_out, high_out = length_range(output_len, ratio)
    return [(rng.randint(low_in, high_in), rng.randint(low_out, high_out)) for _ in range(n)]


def usage_lengths(records: list[dict], n: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` (prompt, reply) pairs drawn with replacement from real chat requests."""
    pairs = [(r["prompt_tokens"], max(1, r["completion_tokens"])) for r in records
             if r["prompt_tokens"] > 0]
    if not pairs:
        raise BenchError("The usage log has no request with a prompt: chat a little first, "
                         "or use --input-len/--output-len.")
    return [rng.choice(pairs) for _ in range(n)]


def check_fits(lengths: list[tuple[int, int]], max_model_len: Optional[int]) -> None:
    if not max_model_len:
        return
    too_long = [p + o for p, o in lengths if p + o > max_model_len]
    if too_long:
        raise BenchError(
            f"{len(too_long)} of {len(lengths)} requests need more than the server's "
            f"max_model_len of {max_model_len} tokens (up to {max(too_long)}); lower "
            "--input-len/--output-len/--range-ratio or serve a longer max-model-len.")
