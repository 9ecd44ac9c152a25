"""Find a model's config.json and weight size without loading the weights.

Looks in a local folder, then the Hugging Face hub cache, then the configs the
project bundles (so ``plan --model baidu/ERNIE-4.5-0.3B-PT`` works offline).
The weight size is read from the safetensors headers or index, never by loading.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Optional

from server.errors import ErnieChatError
from server.plan.kv_planner import ModelShape

BUNDLED = Path(__file__).resolve().parent / "model_configs"


class ModelConfigNotFound(ErnieChatError, FileNotFoundError):
    """No config.json for the model anywhere we look; the message lists where."""


def hub_cache_dir() -> Path:
    """Where Hugging Face keeps downloaded models (HF_HUB_CACHE, else HF_HOME/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def config_folder(model: str) -> Optional[Path]:
    """The folder holding ``model``'s config.json, or None when only a bundled copy exists."""
    local = Path(model).expanduser()
    if (local / "config.json").exists():
        return local
    snapshots = hub_cache_dir() / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def safetensors_bytes(folder: Path) -> Optional[int]:
    """Total tensor bytes, from the index's metadata or each file's JSON header."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return int(total)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
        total += sum(t["data_offsets"][1] - t["data_offsets"][0]
                     for name, t in header.items() if name != "__metadata__")
    return total


def load_shape(model: str) -> tuple[ModelShape, str]:
    """(shape, where the config came from) for a local folder, cached hub id or bundled id."""
    folder = config_folder(model)
    if folder is not None:
        config = json.loads((folder / "config.json").read_text())
        return ModelShape.from_config(config, name=model, weight_bytes=safetensors_bytes(folder)), str(folder)
    bundled = BUNDLED / f"{model.replace('/', '--')}.json"
    if bundled.exists():
        config = json.loads(bundled.read_text())
        return ModelShape.from_config(config, name=model), f"bundled copy ({bundled.name})"
    raise ModelConfigNotFound(
        f"No config.json for {model!r}: not a local folder, not in the hub cache "
        f"({hub_cache_dir()}), and not bundled. Pass the folder that holds config.json.")
