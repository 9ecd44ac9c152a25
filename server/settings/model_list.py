"""ERNIE_MODELS: several models served together, each with its max-model-len and GPU share.

The syntax is ``name[:max_model_len[:share]]``, comma-separated, for example
``baidu/ERNIE-4.5-0.3B-PT:8192:0.3,/models/other:32768``. A plain string (not JSON) because it
is typed into a .env line; a model name cannot hold ":" (hub ids and POSIX folders never need
one). An omitted max-model-len is ERNIE_MAX_MODEL_LEN; an omitted share is computed by
``ernie-chat plan`` from what the model needs (server/plan/models.py).

Each model is served by a vLLM of its own, the first on ERNIE_ENGINE_PORT and the next ones
on the ports after it, under the last part of its name (``baidu/ERNIE-4.5-0.3B-PT`` is served
as ``ERNIE-4.5-0.3B-PT``): fixed ports, so that the app and the CLI's load tools find a model
from the settings alone (:func:`served_models`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

GIB = 1024**3
SYNTAX = ("write name[:max_model_len[:share]], comma-separated, e.g. "
          "baidu/ERNIE-4.5-0.3B-PT:8192:0.3,/models/other:32768")


@dataclass(frozen=True)
class ServedModel:
    """One model as clients reach it: the name requests carry, and where its engine listens."""

    name: str            # as in the settings: hub id, folder, or "demo"
    served_name: str     # what /v1/models answers and requests name
    host: str            # where its engine listens (may be a wildcard; see base_url)
    port: int
    max_model_len: int
    base_url: str        # where a client on this machine reaches it


@dataclass(frozen=True)
class ModelEntry:
    name: str
    max_model_len: Optional[int] = None  # None: ERNIE_MAX_MODEL_LEN
    share: Optional[float] = None        # of the GPU's total memory; None: split by need


def parse_max_model_len(item: str, text: str) -> Optional[int]:
    if not text:
        return None
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"{item!r}: max_model_len {text!r} is not a whole number of tokens above "
                         f"0 (e.g. 8192); {SYNTAX}")
    return int(text)


def parse_share(item: str, text: str) -> Optional[float]:
    if not text:
        return None
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"{item!r}: share {text!r} must be the fraction of the GPU's total memory "
                         f"this model may take, in (0, 1], e.g. 0.3; {SYNTAX}")
    return share


def parse_entry(item: str, position: int) -> ModelEntry:
    parts = [part.strip() for part in item.split(":")]
    if not item.strip():
        raise ValueError(f"model {position} is empty (two commas in a row, or one at an end); {SYNTAX}")
    if len(parts) > 3:
        raise ValueError(f"{item!r} has {len(parts) - 1} colons, at most 2 are allowed (a model "
                         f"name cannot hold ':'); {SYNTAX}")
    if not parts[0]:
        raise ValueError(f"{item!r} has no model name before the first ':'; {SYNTAX}")
    parts += [""] * (3 - len(parts))
    return ModelEntry(parts[0], parse_max_model_len(item, parts[1]), parse_share(item, parts[2]))


def served_name_of(name: str) -> str:
    """The name a model of ERNIE_MODELS is served under: the last part of its hub id or folder."""
    return name.rstrip("/").rsplit("/", 1)[-1]


def parse_models(text: str) -> tuple[ModelEntry, ...]:
    """The models of an ERNIE_MODELS value; () when it is empty. ValueError says what to write."""
    if not text.strip():
        return ()
    entries = tuple(parse_entry(item, n) for n, item in enumerate(text.split(","), 1))
    names = [entry.name for entry in entries]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"{', '.join(twice)} is listed more than once: list each model once and "
                         "give it a larger share instead")
    served = [served_name_of(name) for name in names]
    if clash := sorted({name for name in served if served.count(name) > 1}):
        raise ValueError(f"two models would be served as {', '.join(clash)} (the last part of their "
                         "names): rename or link one of the folders")
    return entries


def checked_models(value: str) -> str:
    parse_models(value)
    return value.strip()


def models_problems(entries: tuple[ModelEntry, ...], utilization: float, kv_cache_gib: Optional[float],
                    engine_copies: int, total_bytes: Optional[int] = None,
                    engine_url: Optional[str] = None, at_once: Optional[int] = None) -> list[str]:
    """What the other settings must be for these models; ``total_bytes`` adds GiB to the figures.
    With ``at_once`` fewer than the models, only that many run together (ERNIE_MODELS_AT_ONCE):
    the largest of their shares (:func:`on_demand_shares`) must fit together."""
    problems = []
    if at_once is not None and at_once > len(entries):
        problems.append(f"ERNIE_MODELS_AT_ONCE={at_once} is more than the {len(entries)} models of "
                        f"ERNIE_MODELS: lower it to {len(entries)} or less, or unset it")
    together = min(at_once or len(entries), len(entries))
    given = sum(entry.share for entry in entries if entry.share is not None)
    unshared = [entry.name for entry in entries if entry.share is None]
    if together < len(entries):
        slot = slot_share(utilization, together)
        largest = sum(sorted(on_demand_shares(entries, utilization, together), reverse=True)[:together])
        if largest > utilization + 1e-9:
            problems.append(
                f"the {together} largest shares of ERNIE_MODELS (a model given none takes "
                f"{slot:g}) add up to {largest:.4g}, more than ERNIE_GPU_MEMORY_UTILIZATION="
                f"{utilization}, the memory of the ERNIE_MODELS_AT_ONCE={together} models that run "
                "at once: lower the shares or raise the utilization")
    elif given > utilization + 1e-9:
        excess = f" ({(given - utilization) * total_bytes / GIB:.2f} GiB)" if total_bytes else ""
        problems.append(
            f"the shares in ERNIE_MODELS add up to {given:.4g}, more than "
            f"ERNIE_GPU_MEMORY_UTILIZATION={utilization} (the memory of all models together) by "
            f"{given - utilization:.4g}{excess}: lower the shares or raise the utilization")
    elif unshared and given >= utilization - 1e-9:
        problems.append(
            f"the shares in ERNIE_MODELS take all of ERNIE_GPU_MEMORY_UTILIZATION={utilization}, "
            f"leaving nothing for {', '.join(unshared)} (given no share): lower the shares")
    if kv_cache_gib is not None:
        problems.append("ERNIE_KV_CACHE_GIB sizes one model's KV pool; with ERNIE_MODELS each "
                        "model's pool comes from its share: unset ERNIE_KV_CACHE_GIB")
    if engine_copies > 1:
        problems.append("ERNIE_MODELS runs one copy of each model: set ERNIE_ENGINE_COPIES=1")
    if engine_url:
        problems.append("ERNIE_MODELS are served by engines the stack starts, ERNIE_ENGINE_URL points "
                        "at one that runs elsewhere: unset one of them")
    return problems


def slot_share(utilization: float, at_once: int) -> float:
    """The share of a model of ERNIE_MODELS given none, when only ``at_once`` run together:
    one slot of the utilization, rounded down to the 4 decimals a person would type."""
    return int(utilization / at_once * 10_000) / 10_000


def starts_on_demand(entries: tuple[ModelEntry, ...], at_once: Optional[int]) -> bool:
    """Whether some models start only when asked for (ERNIE_MODELS_AT_ONCE below their count)."""
    return at_once is not None and at_once < len(entries)


def on_demand_shares(entries: tuple[ModelEntry, ...], utilization: float, at_once: int) -> tuple[float, ...]:
    """Each model's share when only ``at_once`` run together: the one given, else a slot."""
    return tuple(slot_share(utilization, at_once) if entry.share is None else entry.share
                 for entry in entries)
