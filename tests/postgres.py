"""A real PostgreSQL server for the tests, started in a temporary folder and stopped after.

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


def start(port: int) -> Iterator[str]:
    """Yield the URL of a fresh database (user ``ernie``, no password on loopback).

    Its folder is one of its own under /tmp: pytest's temporary folders are private
    to root, and the server runs as ``postgres``.
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
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        run("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE)
        yield f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}"
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
