"""Several models (ERNIE_MODELS): one engine tier per model, each a ``vllm serve`` of its own.

Like llama-swap's processes, each model is a separate vLLM with its own port (the
settings' :attr:`served_models`: ERNIE_ENGINE_PORT and the ports after it), served name,
max-model-len and log (``llm-<served name>.log``), supervised as the single engine is.
On a GPU each one's --gpu-memory-utilization is its share from the plan of
`ernie-chat plan --models` (server/plan/models.py); on a CPU each gets the KV pool one
model gets alone (ERNIE_KV_CACHE_GIB cannot be set with ERNIE_MODELS).

Every model is resolved (its folder, the demo model built) and the whole set checked
before any vLLM starts; then they start one after another, so that no vLLM sizes its
memory while another allocates (vllm-project/vllm#9198).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional

from server.plan import models as model_plan
from server.plan.device import read_memory
from server.plan.model_config import load_shape
from server.settings import Settings
from server.settings.model_list import ModelEntry, ServedModel, on_demand_shares, starts_on_demand
from server.stack.engine_args import EngineCopy
from server.stack.engine_tier import EngineTier, StartupFailed
from server.stack.on_demand import OnDemand
from server.stack.running import RunningStack


def tier_settings(settings: Settings, model: ServedModel, share: Optional[float]) -> Settings:
    """The settings of the one vLLM that serves ``model``: its name, port and length, and on a
    GPU its share."""
    alone = model_plan.model_settings(settings, model.name, model.max_model_len,
                                      share if share is not None else settings.gpu_memory_utilization)
    return alone.serving(model)


def model_log_path(main_log: Path, served_name: str) -> Path:
    """llm-<served name>.log beside llm.log."""
    return main_log.with_name(f"{main_log.stem}-{served_name}{main_log.suffix}")


def unplanned_shares(settings: Settings) -> tuple[float, ...]:
    """Without the plan: the shares given, and the rest of the utilization split evenly (or
    into ERNIE_MODELS_AT_ONCE slots)."""
    entries = settings.model_entries
    if starts_on_demand(entries, settings.models_at_once):
        return on_demand_shares(entries, settings.gpu_memory_utilization, settings.models_at_once)
    given = sum(entry.share for entry in entries if entry.share is not None)
    unshared = sum(1 for entry in entries if entry.share is None) or 1
    rest = (settings.gpu_memory_utilization - given) / unshared
    return tuple(entry.share if entry.share is not None else int(rest * 10_000) / 10_000
                 for entry in entries)


def make_tiers(settings: Settings, device: str, copies: Mapping[str, EngineCopy], root: Path,
               main_log: Path, out: Callable[[str], None] = print) -> list[EngineTier]:
    """One tier of one copy per model, not prepared yet; ``copies``: each model's vLLM by served
    name, the topology's (server/stack/topology.py)."""
    return [EngineTier(tier_settings(settings, model, None),
                       (copies[model.served_name],), device, root,
                       model_log_path(main_log, model.served_name), out,
                       label=f"engine {model.served_name}", model=model.served_name)
            for model in settings.served_models]


def prepare(settings: Settings, tiers: list[EngineTier], device: str,
            out: Callable[[str], None] = print) -> None:
    """Resolve every model, refuse a set that does not fit (with the figures), then build each
    tier's command with its share."""
    for tier in tiers:
        tier.resolve_model()
    try:
        shaped = [(ModelEntry(model.name, model.max_model_len, entry.share), load_shape(tier.model_path)[0])
                  for model, entry, tier in zip(settings.served_models, settings.model_entries, tiers)]
        memory = read_memory(device)
    except Exception as exc:  # no config yet (first download) or no NVML: each vLLM will tell
        out(f"[plan] the check of ERNIE_MODELS was skipped: {exc}")
        shares = unplanned_shares(settings)
    else:
        shares, problems = model_plan.fit(settings, shaped, memory)
        if problems:
            raise StartupFailed("The models of ERNIE_MODELS do not fit (`ernie-chat plan` shows the "
                                "plan; ERNIE_MODELS_AT_ONCE=N runs N at once and the others on "
                                "demand):\n" + "\n".join(f"  - {p}" for p in problems),
                                reason="the models of ERNIE_MODELS do not fit")
        out("[models] " + ", ".join(
            f"{model.served_name} on port {model.port}" + (f" (share {share:g})" if share else "")
            + (" on demand" if i >= settings.at_once else "")
            for i, (model, share) in enumerate(zip(settings.served_models, shares))))
    for model, tier, share in zip(settings.served_models, tiers, shares):
        tier.settings = tier_settings(settings, model, share)
        tier.build_commands()


def on_demand_models(stack: RunningStack) -> Optional[OnDemand]:
    """Who starts and stops the models on demand, when some wait (ERNIE_MODELS_AT_ONCE) or
    idle ones stop (ERNIE_MODEL_IDLE_S); those not started first are parked asleep.
    ``stack``: server.stack.supervisor's Stack, whose tiers are made and prepared."""
    s = stack.settings
    if s.at_once >= len(stack.tiers) and not s.model_idle_s:
        return None
    manager = OnDemand(stack, stack.tiers, s.at_once, s.model_idle_s, stack.out,
                       min_loaded_s=s.model_min_loaded_s)
    manager.park()
    return manager
