"""The CPU torch on a machine whose pip indexes lack it (a fresh box with only PyPI).

PyTorch's CPU index cannot be reached from our machines, so a real http.server stands in
for it: a PEP 503 simple index that serves the torch wheel of our local wheel folder. The
local sources are hidden from pip the way a fresh box lacks them (no PIP_FIND_LINKS, no
pip config file), and the real ``ensure_engine_env`` installs torch into a new venv.
Only the torch step runs for real (the pin file in the scratch root holds torch alone):
the other pins come from PyPI as before and would take minutes.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from server.settings import load_settings
from server.stack import engine_env, platforms
from server.stack.processes import free_port
from tests.support.torch_wheel import LOCAL_TORCH, TORCH, TORCH_WHEEL

pytestmark = LOCAL_TORCH


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def stand_in_index(tmp_path_factory):
    """(simple-index URL, request log) of a PEP 503 index holding the local torch wheel."""
    top = tmp_path_factory.mktemp("torch-index")
    (top / "files").mkdir()
    (top / "files" / TORCH_WHEEL.name).symlink_to(TORCH_WHEEL)
    (top / "simple" / "torch").mkdir(parents=True)
    (top / "simple" / "torch" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{quote(TORCH_WHEEL.name)}'
        f'#sha256={sha256(TORCH_WHEEL)}">{TORCH_WHEEL.name}</a></body></html>\n')
    port = free_port()
    log = top / "requests.log"
    with open(log, "w") as err:
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                   "--directory", str(top)], stdout=subprocess.DEVNULL, stderr=err)
    try:
        url = f"http://127.0.0.1:{port}/simple"
        for _ in range(100):
            try:
                httpx.get(f"{url}/torch/", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, log
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def fresh_box(monkeypatch, tmp_path):
    """pip without our local wheel folder and pip.conf, as on a machine with only PyPI;
    a scratch project root whose x86_64 pin file holds torch alone."""
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    root = tmp_path / "project"
    pins = root / platforms.CPU_REQUIREMENTS["x86_64"]
    pins.parent.mkdir(parents=True)
    pins.write_text(f"{TORCH}\n")
    return root


def test_a_fresh_box_gets_torch_from_the_torch_index_and_says_so(fresh_box, stand_in_index, monkeypatch, capfd):
    url, requests_log = stand_in_index
    monkeypatch.setenv("ERNIE_TORCH_INDEX_URL", url)  # the setting, as a user would give it
    venv = fresh_box / ".venv-engine"
    python = engine_env.ensure_engine_env(venv, "cpu", fresh_box, load_settings().torch_index_url)
    out = capfd.readouterr().out
    assert f"{TORCH} is not in the package indexes pip is configured with here: installing it from {url}" in out
    assert f"[torch] {TORCH} installed from {url}" in out
    assert f'"GET /files/{quote(TORCH_WHEEL.name)} HTTP/1.1" 200' in requests_log.read_text()
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    assert version == TORCH.split("==")[1]
    assert (venv / engine_env.STAMP).exists()


def test_an_unreachable_torch_index_fails_fast_with_what_to_do(fresh_box):
    dead = f"http://127.0.0.1:{free_port()}/simple"  # nothing listens there
    venv = fresh_box / ".venv-engine"
    started = time.monotonic()
    with pytest.raises(engine_env.TorchNotFound) as info:
        engine_env.ensure_engine_env(venv, "cpu", fresh_box, dead)
    took = time.monotonic() - started
    message = str(info.value)
    assert f"{TORCH} was found neither by pip as configured here nor at {dead}" in message
    assert "ERNIE_TORCH_INDEX_URL" in message and "PIP_FIND_LINKS" in message
    assert not (venv / engine_env.STAMP).exists()
    print(f"venv + probe + failed fallback: {took:.1f} s")
