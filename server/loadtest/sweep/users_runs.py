"""tune's users objective: each run of a point is a steady state of chat users.

With ``tune --users N`` a run sends N users of the user model (server/loadtest/users/model.py)
straight to the point's engine, or to HAProxy in front of its copies: they arrive over
``--ramp-s``, then chat (send, read the whole reply, think) for ``--step-s``, as one step of
``capacity --through engine``. The replies sent in that steady state make the run's summary,
so the sweep's table, plot and choice read it as they read a bench run: its goodput is the
replies per second that met the objective (TTFT, and TPOT <= 1000 / the per-user tokens/s).
Whether the run is within the objective is judged as capacity judges a step: nothing lost,
TTFT p99 and the per-user rate p10 (``Objective.check``); the choice takes only points whose
every run was. The app's workers are not in the path: `capacity --through app` measures them.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path

from server.loadtest.lib import cpu
from server.loadtest.lib.chat_socket import read_prompts
from server.loadtest.lib.config import BenchConfig
from server.loadtest.lib.stats import LevelSummary, RequestRecord, Slo, summarize_level
from server.loadtest.users import report as user_report
from server.loadtest.users.capacity import Objective
from server.loadtest.users.chats import Target
from server.loadtest.users.load import sampled_user_load
from server.loadtest.users.model import UserModel


@dataclass(frozen=True)
class UsersLoad:
    """What every run of every point sends: the users, their pace and the objective."""

    users: int
    objective: Objective
    think_s: float = 3.0
    ramp_s: float = 10.0
    step_s: float = 60.0
    processes: int = 1

    @property
    def run_s(self) -> float:
        """The send window of one run; the replies in flight at its end come after it."""
        return self.ramp_s + self.step_s

    def model(self, seed: int, reply_timeout_s: float) -> UserModel:
        return UserModel(users=self.users, turns=0, think_s=self.think_s, ramp_s=self.ramp_s,
                         window_s=self.run_s, reply_timeout_s=reply_timeout_s, seed=seed)

    @property
    def slo(self) -> Slo:
        rate = self.objective.tokens_per_s
        return Slo(self.objective.ttft_p99_ms, 1000.0 / rate if rate > 0 else None)

    def describe(self) -> str:
        o = self.objective
        return (f"{self.users} users (think {self.think_s:g} s, ramp {self.ramp_s:g} s, steady "
                f"{self.step_s:g} s) within TTFT p99 <= {o.ttft_p99_ms:g} ms and >= "
                f"{o.tokens_per_s:g} tokens/s per user (p10)")

    def as_dict(self) -> dict:
        return {**asdict(self), "objective": asdict(self.objective)}

    @classmethod
    def from_dict(cls, data: dict) -> "UsersLoad":
        return cls(**{**data, "objective": Objective(**data["objective"])})


def records_of(replies: list[dict], users: int) -> list[RequestRecord]:
    """The user run's replies as the bench's request records (no prompt counts: the chats'
    histories grow, and only the engine counts them)."""
    return [RequestRecord(index=i, concurrency=users, prompt_tokens=0, max_tokens=0,
                          start_s=r["sent_s"], success=bool(r["complete"]), error=r["error"],
                          ttft_s=r["ttft_s"], e2e_s=r["total_s"], output_tokens=r["tokens"] or 0)
            for i, r in enumerate(replies)]


def run_summary(result: dict, load: UsersLoad) -> tuple[LevelSummary, str]:
    """A user run as tune's run summary, and why it missed the objective ('' within it)."""
    model = result["model"]
    replies = [r for r in result["replies"] if model["ramp_s"] <= r["sent_s"] < model["window_s"]]
    level = summarize_level(records_of(replies, load.users), model["window_s"] - model["ramp_s"],
                            load.slo)
    ok, why = load.objective.check(result["summary"]["steady"], result["summary"])
    return level, "" if ok else why


def run_users(load: UsersLoad, cfg: BenchConfig, system_prompt: str, seed: int, label: str,
              out_dir: Path) -> tuple[LevelSummary, str]:
    """One run at the engine ``cfg`` names, chats as the app starts them (its system prompt);
    the run's report goes to ``out_dir``."""
    target = Target("engine", cfg.url, cfg.api_key, system_prompt, max_tokens=cfg.load.output_len,
                    ignore_eos=cfg.ignore_eos, temperature=cfg.temperature, top_p=cfg.top_p,
                    api_key_from=cfg.api_key_from)
    model = load.model(seed, cfg.request_timeout_s)
    result = asyncio.run(sampled_user_load(target, model, read_prompts(None), label,
                                           min(load.processes, load.users)))
    user_report.save(result, out_dir, plots=False)
    print(cpu.render_run(result["cpu"]), flush=True)
    return run_summary(result, load)

