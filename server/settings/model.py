"""The model: which checkpoint, and the name the engine serves it under."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
# The word that asks for the built-in demo model instead of a checkpoint.
DEMO_MODEL = "demo"


class ModelSettings(BaseModel):
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

    def problems(self) -> list[str]:
        return []
