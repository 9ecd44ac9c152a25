"""The demo model's builder, run for real with the engine's Python: a few steps of the small
size. `prepare` and `up` copy the repository's built copies (tests/unit/test_demo_weights.py),
so this is where the builder itself runs in the suite."""

from __future__ import annotations

import json
import struct
import subprocess

from server.demo_stamp import DEMO_BUILDER
from server.paths import ROOT
from server.stack import provision


def safetensors_header(path) -> dict:
    """The tensors' names and shapes, from the file's JSON header (its first 8 bytes: its length)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


def test_the_builder_writes_a_whole_model_whose_tokenizer_and_shape_are_the_built_copys(engine_python, tmp_path):
    out = tmp_path / "demo-small"
    done = subprocess.run([str(engine_python), "-m", "server.stack.demo_model", str(out), "--size", "small",
                           "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads(done.stdout.splitlines()[-1])
    assert (info["builder"], info["size"], info["steps"]) == (DEMO_BUILDER, "small", 3)
    assert json.loads((out / "build_info.json").read_text()) == info
    assert not list(tmp_path.glob("demo-small.tmp-*"))  # the staging folder became the model
    shipped = provision.shipped_demo_model(ROOT, "small")
    # The tokenizer and the configuration do not depend on the steps: the same bytes as the
    # repository's copy, built with 300.
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
                 "special_tokens_map.json"):
        assert (out / name).read_bytes() == (shipped / name).read_bytes(), name
    ours, theirs = safetensors_header(out / "model.safetensors"), safetensors_header(shipped / "model.safetensors")
    assert {k: v["shape"] for k, v in ours.items() if k != "__metadata__"} == \
        {k: v["shape"] for k, v in theirs.items() if k != "__metadata__"}
    # Three steps did not get as far as 300: the weights differ.
    assert (out / "model.safetensors").read_bytes() != (shipped / "model.safetensors").read_bytes()
