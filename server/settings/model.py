"""The model: which checkpoint, and the name the engine serves it under."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from pydantic import AfterValidator, BaseModel, Field

from server.settings.model_list import (ModelEntry, ServedModel, checked_models, models_problems, parse_models,
                                        served_name_of)
from server.settings.network import client_url

DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
# The word that asks for the built-in demo model instead of a checkpoint.
DEMO_MODEL = "demo"
# A second built-in demo model, smaller and of another vocabulary (server/stack/demo_model.py):
# served beside `demo` (ERNIE_MODELS) it shows which model answered.
DEMO_SMALL_MODEL = "demo-small"


class ModelSettings(BaseModel):
    model: str = Field(
        DEFAULT_MODEL,
        description="Hub id or local folder of the model; 'demo' for the built-in demo model "
        "('demo-small': a smaller one, built into ERNIE_DEMO_MODEL_DIR-small). "
        "A hub id that cannot be reached (no local copy, no network) falls back to the demo model.",
    )
    served_model_name: str = Field(
        "ernie-4.5-0.3b", min_length=1, description="Name the engine serves the model under."
    )
    demo_model_dir: Path = Field(
        Path(".cache/demo-model"), description="Where the built-in demo model is built and kept."
    )

    models: Annotated[str, AfterValidator(checked_models)] = Field(
        "",
        description="Several models on one GPU, comma-separated name[:max_model_len[:share]] "
        "(e.g. baidu/ERNIE-4.5-0.3B-PT:8192:0.3,/models/other:32768): each with its longest "
        "request (default ERNIE_MAX_MODEL_LEN) and its share of the GPU's total memory (default: "
        "the rest of ERNIE_GPU_MEMORY_UTILIZATION, split by what each needs). Unset: ERNIE_MODEL "
        "alone. `up` serves each by a vLLM of its own, the first on ERNIE_ENGINE_PORT and the "
        "next ones on the ports after it, under the last part of its name (docs/models.md).",
    )

    models_at_once: Optional[int] = Field(
        None, ge=1,
        description="How many models of ERNIE_MODELS run at once (default: all of them). Fewer: "
        "the first ones start with `up`, each other one on its chat's first request, and the "
        "least recently used one stops to make room; on a GPU each model without a share in "
        "ERNIE_MODELS gets ERNIE_GPU_MEMORY_UTILIZATION divided by this number (docs/models.md).",
    )
    model_idle_s: float = Field(
        0.0, ge=0,
        description="With ERNIE_MODELS: a model that had no request for this many seconds stops, "
        "freeing its memory, and starts again on its next request (0: it stays up, until another "
        "needs its place with ERNIE_MODELS_AT_ONCE).",
    )
    # Fixed rather than a multiple of the model's last load time: the same for every model and
    # known before its first start. A swap costs the users of the model pushed out two loads
    # (out and back in), 20-70 s each for the demo models on a busy CPU, 30-50 s on the H200:
    # with 120 s a user who keeps asking an asleep model makes the loaded one's users wait at
    # most about (2 x load + 10) / (120 + 2 x load + 10) of the time (a third with 30 s loads)
    # instead of most of it, while a user of an asleep model waits at most 120 s for a place.
    model_min_loaded_s: float = Field(
        120.0, ge=0,
        description="With ERNIE_MODELS_AT_ONCE: a model started or woken stays loaded at least "
        "this many seconds before another model's request may push it out (the model it pushed "
        "out may have its place back once it is idle); the asked model waits meanwhile. "
        "ERNIE_MODEL_IDLE_S still stops it when unused. 0: no minimum (docs/models.md).",
    )

    @property
    def model_entries(self) -> tuple[ModelEntry, ...]:
        return parse_models(self.models)

    def problems(self) -> list[str]:
        if not self.models:
            return [f"{name} is about the models of ERNIE_MODELS: set ERNIE_MODELS, or unset {name}"
                    for name, value in (("ERNIE_MODELS_AT_ONCE", self.models_at_once),
                                        ("ERNIE_MODEL_IDLE_S", self.model_idle_s)) if value]
        return models_problems(self.model_entries, self.gpu_memory_utilization, self.kv_cache_gib,
                               self.copies_per_gpu, engine_url=self.engine_url,
                               at_once=self.models_at_once)

    @property
    def at_once(self) -> int:
        """How many of the served models run at once: ERNIE_MODELS_AT_ONCE, or all of them."""
        return self.models_at_once or len(self.served_models)

    def serving(self, model: ServedModel):
        """These settings as ``model`` of ERNIE_MODELS is served and reached: its name, served
        name, port and max-model-len, and no list of models (nor what is said about them)."""
        return self.model_copy(update={"model": model.name, "served_model_name": model.served_name,
                                       "engine_port": model.port, "max_model_len": model.max_model_len,
                                       "models": "", "models_at_once": None, "model_idle_s": 0.0})

    @property
    def served_models(self) -> tuple[ServedModel, ...]:
        """Every model the chat offers: ERNIE_MODEL alone where the engine settings say, else
        each of ERNIE_MODELS on ERNIE_ENGINE_PORT and the ports after it, in their order."""
        if not self.models:
            return (ServedModel(self.model, self.served_model_name, self.engine_host, self.engine_port,
                                self.max_model_len, self.engine_base_url),)
        return tuple(
            ServedModel(entry.name, served_name_of(entry.name), self.engine_host, self.engine_port + i,
                        entry.max_model_len or self.max_model_len,
                        client_url(self.engine_host, self.engine_port + i))
            for i, entry in enumerate(self.model_entries))
