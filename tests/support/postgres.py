"""A real PostgreSQL server for the tests, started in a temporary folder and stopped after:
one per test run (tests/conftest.py), a database of its own for each module that uses it.

Debian's ``postgresql`` package provides the binaries (``./scripts/test`` installs
it where it is missing).  PostgreSQL refuses to run as root, so as root the
server runs as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

USER, DATABASE = "ernie", "chats"


def binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql "
                           "(./scripts/test does it)")
    return Path(found[-1]).parent


def as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class Server:
    """A running server: each caller takes a database of its own on it (``new_database``)."""

    def __init__(self, port: int, run):
        self.port, self._run, self._made = port, run, 0

    def new_database(self) -> str:
        """The URL of a new, empty database (user ``ernie``, no password on loopback)."""
        self._made += 1
        name = f"{DATABASE}_{self._made}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, name)
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{name}"


def serve(port: int) -> Iterator[Server]:
    """Yield a fresh server on ``port``, stopped (and its folder removed) after.

    Its folder is one of its own under /tmp: pytest's temporary folders are private
    to root, and the server runs as ``postgres``.  Many apps of one test run keep
    connections open to it at once: it takes more than the default 100.
    """
    bin_dir = binaries()
    folder = Path(tempfile.mkdtemp(prefix="ernie-pg-"))
    data = folder / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(data, "postgres")
    run = lambda *argv: subprocess.run(as_owner([str(bin_dir / argv[0]), *argv[1:]]), check=True,
                                       capture_output=True, text=True, timeout=120)
    run("initdb", "-D", str(data), "-U", USER, "-A", "trust", "--no-sync")
    run("pg_ctl", "-D", str(data), "-w", "-l", str(folder / "server.log"), "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400",
        "start")
    try:
        yield Server(port, run)
    finally:
        run("pg_ctl", "-D", str(data), "-m", "fast", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def fetch(url: str, query: str, *args) -> list:
    """The rows of one query, in a thread of its own (callers may run inside an event loop)."""
    import asyncio
    import threading

    import asyncpg

    from server.chat_db import plain_postgres_url

    async def read():
        db = await asyncpg.connect(plain_postgres_url(url))
        try:
            return await db.fetch(query, *args)
        finally:
            await db.close()
    rows: list = []
    worker = threading.Thread(target=lambda: rows.extend(asyncio.run(read())))
    worker.start()
    worker.join()
    return rows
