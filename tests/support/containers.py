"""The CPU image built and run with Debian's podman, as tests/deploy/test_containers.py does.

No image registry is reachable from the test machines, so the image's ``FROM`` is replaced
(``podman build --from``) by a base made from Debian's packages with ``mmdebstrap`` and
``podman import``; it holds the packages the Containerfile's ``PACKAGES`` names, so its apt step
is skipped. pip in the build reaches PyPI with this machine's CA bundle, and finds the local
wheel folders and file indexes this machine's pip is configured with, mounted read-only.
What podman needs on these machines (checked on Debian 12's podman 4.3): Debian's runc (crun
fails on the kernel's hybrid cgroups), no default ulimits, cgroupfs: a containers.conf of the
test's own (``CONTAINERS_CONF``), so the machine's podman is left as it is.

``python -m tests.support.containers`` builds the image: ``./scripts/test`` runs it in the
background while the first tests run. One build at a time (a file lock): the test's own build
waits for it, then finds podman's layer cache current.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from server.paths import ROOT
from server.settings import load_settings
from server.stack import engine_env
from tests.support.stack_process import descendants

CONTAINERFILE = ROOT / "deploy" / "Containerfile"
COMPOSE_FILE = ROOT / "compose.yaml"
IMAGE = "localhost/ernie-chat:cpu"  # compose.yaml's image: the compose test runs the built one
SUITE = "bookworm"
USER_ID = 10001  # the image's unprivileged user
TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "podman-compose": "podman-compose"}
CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""
BUILD_LIMIT_S = 1800
WORK = ROOT / ".cache" / "podman"  # the test's containers.conf and the build's pip.conf


def missing_tools() -> list[str]:
    return [package for tool, package in TOOLS.items()
            if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]


def why_no_podman() -> Optional[str]:
    """None when podman and its helpers are here, installed with apt when root; else why not."""
    missing = missing_tools()
    if not missing:
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"podman is not installable here (needs root and apt-get): {', '.join(missing)} missing"
    done = subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                          + " ".join(missing), shell=True, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"apt-get install {' '.join(missing)} failed: {done.stderr[-500:]}"
    return None


def environment() -> dict[str, str]:
    conf = WORK / "containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def image_packages() -> list[str]:
    """The Debian packages the Containerfile installs, from its ``ARG PACKAGES`` line."""
    found = re.search(r'^ARG PACKAGES="([^"]+)"', CONTAINERFILE.read_text(), re.M)
    assert found, "deploy/Containerfile has no ARG PACKAGES line"
    return found.group(1).split()


def base_image(env: dict[str, str]) -> str:
    """The Debian base with the image's packages, made once per package list and kept."""
    packages = image_packages()
    tag = "localhost/ernie-chat-base:" + hashlib.sha256(" ".join([SUITE, *packages]).encode()).hexdigest()[:12]
    if subprocess.run(["podman", "image", "exists", tag], env=env).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(dir=ROOT / ".cache") as tmp:
        tar = Path(tmp) / "base.tar"
        subprocess.run(["mmdebstrap", "--variant=required", f"--include={','.join(packages)}", SUITE, str(tar)],
                       check=True, capture_output=True, timeout=1200)
        podman(env, "import", str(tar), tag, timeout=600)
    return tag


def local_pip_sources() -> list[str]:
    """The local folders this machine's pip finds packages in (find-links, file:// indexes)."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    sources = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] in ("find-links", "extra-index-url", "index-url"):
            for item in value.strip("'\"").split():
                path = item.removeprefix("file://")
                if path.startswith("/") and Path(path).exists() and item not in sources:
                    sources.append(item)
    return sources


def pip_mounts(folder: Path) -> list[str]:
    """``-v`` arguments: a pip.conf naming the local sources, the sources, the CA bundle."""
    sources = local_pip_sources()
    links = [s for s in sources if not s.startswith("file://")]
    indexes = [s for s in sources if s.startswith("file://")]
    bundle = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    conf = folder / "pip.conf"
    conf.write_text("[global]\n" + (f"find-links = {' '.join(links)}\n" if links else "")
                    + (f"extra-index-url = {' '.join(indexes)}\n" if indexes else "")
                    + "cert = /etc/ssl/certs/ca-certificates.crt\n")
    mounts = [f"{conf}:/etc/pip.conf:ro"]
    if Path(bundle).is_file():
        mounts.append(f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro")
    for source in sources:
        path = source.removeprefix("file://").removesuffix("/simple")
        mounts.append(f"{path}:{path}:ro")
    return [arg for mount in dict.fromkeys(mounts) for arg in ("-v", mount)]


def build_image(env: dict[str, str]) -> str:
    """deploy/Containerfile built on the Debian base; podman's layer cache keeps what is unchanged."""
    with engine_env.building(WORK / "image"):
        base = base_image(env)
        podman(env, "build", "--format", "docker", "--from", base, "--network", "host",
               *pip_mounts(WORK), "-f", str(CONTAINERFILE), "-t", IMAGE, str(ROOT), timeout=BUILD_LIMIT_S)
    return IMAGE


def volume_path(env: dict[str, str], name: str) -> Path:
    return Path(podman(env, "volume", "inspect", "--format", "{{.Mountpoint}}", name))


def seed_volume(env: dict[str, str], name: str, source: Path, under: str) -> None:
    """Copy ``source`` into a new volume as ``under``, owned by the image's user, as a first
    start would have left it (the demo model, built on this machine already)."""
    podman(env, "volume", "create", name)
    root = volume_path(env, name)
    shutil.copytree(source, root / under)
    for path in [root, *root.rglob("*")]:
        os.chown(path, USER_ID, USER_ID)


def container_processes(env: dict[str, str], name: str) -> list[tuple[int, str]]:
    """(host pid, state letter) of each process of a running container."""
    pid = int(podman(env, "inspect", "--format", "{{.State.Pid}}", name))
    found = []
    for p in [pid, *descendants(pid)]:
        try:
            found.append((p, Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]))
        except OSError:
            continue
    return found


INSTRUCTIONS = {"FROM", "ARG", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "USER", "VOLUME", "EXPOSE",
                "HEALTHCHECK", "STOPSIGNAL", "ENTRYPOINT", "CMD", "LABEL", "SHELL", "ONBUILD"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Containerfile's (INSTRUCTION, arguments), continuation lines joined, comments left out;
    an unknown instruction fails, as a build would."""
    joined, parsed = "", []
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        joined += line.rstrip()
        if joined.endswith("\\"):
            joined = joined[:-1]
            continue
        word, _, rest = joined.strip().partition(" ")
        assert word.upper() in INSTRUCTIONS and word == word.upper(), f"{path.name}: {joined!r}"
        parsed.append((word, rest.strip()))
        joined = ""
    assert joined == "", f"{path.name} ends inside a continued line"
    return parsed


if __name__ == "__main__":
    if reason := why_no_podman():
        sys.exit(f"no image built: {reason}")
    # After the checkout's own engine environment (`prepare`, started first, builds it; this
    # waits for it or builds it): the two install the same vLLM, and the first tests wait for
    # the checkout's.
    engine_env.ensure_engine_env(ROOT / ".venv-engine", "cpu", ROOT, load_settings().torch_index_url)
    print(f"built {build_image(environment())}")
