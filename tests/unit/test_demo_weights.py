"""The repository's built demo models (server/stack/demo_weights/): current, whole, and what
`prepare` and `up` copy instead of training. The builder itself runs in
tests/engine/test_demo_build.py."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from server.demo_stamp import DEMO_BUILDER
from server.paths import ROOT
from server.stack import provision

SIZES = ("default", "small")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("size", SIZES)
def test_each_built_copy_comes_from_this_checkouts_builder_and_corpus(size):
    shipped = provision.shipped_demo_model(ROOT, size)
    wanted = provision.file_digest(*provision.demo_inputs(ROOT)) + ("" if size == "default" else f" {size}")
    assert (shipped / provision.STAMP).read_text().strip() == wanted, (
        f"{shipped.relative_to(ROOT)} was built from another demo_model.py or demo_corpus.txt: "
        f"refresh it as {shipped.parent.relative_to(ROOT)}/README.md says")
    info = json.loads((shipped / "build_info.json").read_text())
    assert (info["builder"], info["size"], info["steps"], info["seed"]) == (DEMO_BUILDER, size, 300, 0)
    assert info["corpus_sha256"] == sha256(ROOT / "server" / "stack" / "demo_corpus.txt")
    assert info["model_sha256"] == sha256(shipped / "model.safetensors")  # the weights it wrote


def checkout(tmp_path: Path) -> Path:
    """The files ensure_demo_model reads, in a checkout of its own."""
    root = tmp_path / "checkout"
    for path in [*provision.demo_inputs(ROOT), *(provision.shipped_demo_model(ROOT, s) for s in SIZES)]:
        target = root / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if path.is_dir() else shutil.copy)(path, target)
    return root


def test_a_current_copy_is_copied_without_building_and_only_once(tmp_path, monkeypatch, capsys):
    root = checkout(tmp_path)
    builds = []
    monkeypatch.setattr(provision, "run_step", lambda *args, **kw: builds.append(args))
    target = tmp_path / "cache" / "demo-model-small"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # an older model there is replaced whole
    assert provision.ensure_demo_model(target, Path("/no/engine/python"), root, size="small") == target
    shipped = provision.shipped_demo_model(root, "small")
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in shipped.iterdir()
                                                              if p.name != "README.md")
    assert (target / "model.safetensors").read_bytes() == (shipped / "model.safetensors").read_bytes()
    assert builds == [] and "copied" in capsys.readouterr().out
    assert not list(target.parent.glob("*.tmp-*")) and not list(target.parent.glob("*.old-*"))
    (shipped / "model.safetensors").unlink()  # a second call finds the folder current
    assert provision.ensure_demo_model(target, Path("/no/engine/python"), root, size="small") == target
    assert builds == [] and (target / "model.safetensors").exists()


def test_a_changed_corpus_builds_the_model_instead_of_copying(tmp_path, monkeypatch):
    root = checkout(tmp_path)
    corpus = root / "server" / "stack" / "demo_corpus.txt"
    corpus.write_text(corpus.read_text() + "\nUser: one more\nAssistant: line\n")
    builds = []

    def build(argv, *args, **kw):
        builds.append(argv)
        out = Path(argv[argv.index("server.stack.demo_model") + 1])
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
    monkeypatch.setattr(provision, "run_step", build)
    target = tmp_path / "cache" / "demo-model"
    provision.ensure_demo_model(target, Path("/engine/python"), root)
    assert len(builds) == 1 and builds[0][0] == "/engine/python"
    assert (target / provision.STAMP).read_text().strip() == provision.file_digest(*provision.demo_inputs(root))
    assert not (target / "model.safetensors").exists()  # nothing of the stale copy
