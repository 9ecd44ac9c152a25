"""server/plan/model_config.py: finding config.json and the weight size without loading weights.

The safetensors files here are written by hand (8-byte little-endian header
length, JSON header, raw bytes), so the expected sizes come from the bytes
written, not from the safetensors library.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from server.plan import kv_planner as kp
from server.plan.model_config import ModelConfigNotFound, load_shape, safetensors_bytes

TINY_CONFIG = {
    "architectures": ["Ernie4_5ForCausalLM"],
    "hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
    "num_hidden_layers": 2, "intermediate_size": 256, "vocab_size": 300,
    "max_position_embeddings": 4096, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]],
                      metadata: dict | None = None) -> int:
    """Write a safetensors file by hand; returns the number of tensor bytes in it.

    ``tensors`` maps name -> (dtype, shape, bytes per element).
    """
    header, offset = {}, 0
    for name, (dtype, shape, itemsize) in tensors.items():
        size = itemsize
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if metadata is not None:
        header["__metadata__"] = metadata
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header to 8 bytes
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))
    return offset


def make_model_folder(folder: Path, config: dict = TINY_CONFIG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_local_folder_weight_bytes_sum_of_data_offsets(tmp_path):
    folder = make_model_folder(tmp_path / "tiny")
    written = write_safetensors(folder / "model.safetensors", {
        "embed.weight": ("BF16", [300, 128], 2),
        "layer.0.q.weight": ("BF16", [128, 128], 2),
        "norm.weight": ("F32", [128], 4),
    }, metadata={"format": "pt"})
    assert written == 300 * 128 * 2 + 128 * 128 * 2 + 128 * 4
    assert safetensors_bytes(folder) == written

    shape, source = load_shape(str(folder))
    assert source == str(folder)
    assert shape.weight_bytes == written
    assert shape.weights == written          # measured, not the parameter estimate
    assert shape.weights != shape.parameter_count * 2
    assert shape.name == str(folder)


def test_local_folder_shape_from_config(tmp_path):
    folder = make_model_folder(tmp_path / "tiny")
    shape, _ = load_shape(str(folder))
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (2, 1, 64)
    assert shape.max_position_embeddings == 4096
    assert kp.kv_bytes_per_token(shape) == 2 * 2 * 1 * 64 * 2


def test_several_shards_are_summed(tmp_path):
    folder = make_model_folder(tmp_path / "sharded")
    a = write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": ("BF16", [10, 10], 2)})
    b = write_safetensors(folder / "model-00002-of-00002.safetensors", {"b": ("F32", [7], 4),
                                                                        "c": ("I8", [3, 3], 1)})
    assert (a, b) == (200, 37)
    assert safetensors_bytes(folder) == 237


def test_index_total_size_wins_over_headers(tmp_path):
    folder = make_model_folder(tmp_path / "indexed")
    write_safetensors(folder / "model-00001-of-00001.safetensors", {"a": ("BF16", [10, 10], 2)})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 987_654_321},
         "weight_map": {"a": "model-00001-of-00001.safetensors"}}))
    assert safetensors_bytes(folder) == 987_654_321
    assert load_shape(str(folder))[0].weights == 987_654_321


def test_index_without_total_size_falls_back_to_headers(tmp_path):
    folder = make_model_folder(tmp_path / "indexed")
    write_safetensors(folder / "model.safetensors", {"a": ("BF16", [10, 10], 2)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    assert safetensors_bytes(folder) == 200


def test_no_safetensors_means_estimated_weights(tmp_path):
    folder = make_model_folder(tmp_path / "config-only")
    assert safetensors_bytes(folder) is None
    shape, _ = load_shape(str(folder))
    assert shape.weight_bytes is None
    assert shape.weights == shape.parameter_count * 2


def test_hub_cache_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = make_model_folder(tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots" / "0123abcd")
    written = write_safetensors(snapshot / "model.safetensors", {"w": ("BF16", [64, 64], 2)})

    shape, source = load_shape("acme/tiny-chat")
    assert Path(source) == snapshot
    assert shape.name == "acme/tiny-chat"
    assert shape.num_layers == 2
    assert shape.weights == written == 64 * 64 * 2


def test_hub_cache_picks_newest_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshots = tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots"
    old = make_model_folder(snapshots / "old", {**TINY_CONFIG, "num_hidden_layers": 3})
    new = make_model_folder(snapshots / "new", {**TINY_CONFIG, "num_hidden_layers": 5})
    os.utime(old / "config.json", (1_000_000, 1_000_000))
    os.utime(new / "config.json", (2_000_000, 2_000_000))
    shape, source = load_shape("acme/tiny-chat")
    assert Path(source) == new
    assert shape.num_layers == 5


def test_hub_cache_wins_over_bundled_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    make_model_folder(tmp_path / "hub" / "models--baidu--ERNIE-4.5-0.3B-PT" / "snapshots" / "abc",
                      {**TINY_CONFIG, "num_hidden_layers": 7})
    shape, source = load_shape("baidu/ERNIE-4.5-0.3B-PT")
    assert "bundled" not in source
    assert shape.num_layers == 7


def test_bundled_copy_when_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    shape, source = load_shape("baidu/ERNIE-4.5-0.3B-PT")
    assert "bundled" in source
    assert shape.num_layers == 18
    assert shape.weight_bytes is None


def test_unknown_model_raises_helpful_error(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    with pytest.raises(ModelConfigNotFound) as info:
        load_shape("nobody/no-such-model")
    message = str(info.value)
    assert "'nobody/no-such-model'" in message
    assert str(hub) in message                 # says where it looked
    assert "config.json" in message            # and what to pass instead
    assert isinstance(info.value, FileNotFoundError)  # the CLI catches it as such


def test_folder_without_config_is_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    empty = tmp_path / "no-config"
    empty.mkdir()
    write_safetensors(empty / "model.safetensors", {"w": ("BF16", [2], 2)})
    with pytest.raises(ModelConfigNotFound):
        load_shape(str(empty))
