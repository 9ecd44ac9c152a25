"""The sidebar's search over one user's long history: through the search's index, against the
scan it replaced (every chat of the user loaded, its texts folded and compared in Python), on
SQLite and on PostgreSQL.

    .venv/bin/python benchmarks/chat_search.py [--chats 1000] [--messages 20] [--queries 200]
                                               [--scan-queries 50] [--backends sqlite,postgres]

Each backend gets a new database: one user's chats of ``--messages`` steps each (a message,
then its reply with a figures line, alternately), their text drawn from a seeded mix of English
words and Chinese phrases, written as rows (Chainlit's columns) and then indexed as an app's
first start indexes a database from before the index (app/kept/search_index.build), which is
timed too.  The queries are seeded as well: one to three words, common and rare, English and
Chinese, short (under three characters: no trigram to look up) and long, some found nowhere.
Every query is timed through the app's data layer (``SearchingLayer.list_threads``, a page of
20, as the sidebar asks); the scan times the same queries as the app searched before
(``--scan-queries`` of them, it is slow), and each of them must find the same chats as the index.
PostgreSQL is a throwaway server of its own (tests/support/postgres.py: Debian's ``postgresql``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CHAINLIT_APP_ROOT", str(ROOT))  # Chainlit's config, not one made in the cwd

from app.texts import FIGURES_MARK  # noqa: E402
from server import chat_db  # noqa: E402

SEED = 20261206
ENGLISH = ("apricot kyoto temple garden python compiler harbour violin glacier museum lantern "
           "recipe orbit marathon sparrow copper meadow quantum ribbon falcon pepper summit canvas "
           "thunder pillow saffron cobalt prism walnut ember tundra velvet anchor riddle beacon "
           "the a of to and in is it that for on with as at by from this be or an").split()
CHINESE = ("机器学习 深度学习 神经网络 数据库 搜索引擎 自然语言 处理器 天气预报 旅行计划 "
           "咖啡 茶叶 北京 上海 杭州 西湖 长城 故宫 熊猫 月饼 春节 分支 模型 训练 推理").split()
FIGURES = FIGURES_MARK + "120 ms to first token · 10.0 tok/s · 20 prompt + 11 reply tokens*"


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return "".join(rng.choice(CHINESE) for _ in range(rng.randint(4, 12))) + "。"
    words = [rng.choice(ENGLISH) for _ in range(rng.randint(8, 30))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(CHINESE))
    if rng.random() < 0.01:  # a rare word, a handful of chats have it
        words.append(f"zebra{rng.randint(0, 20)}")
    return " ".join(words).capitalize() + "."


def queries(rng: random.Random, count: int) -> list[str]:
    shapes = (
        lambda: rng.choice(ENGLISH[:36]),                                   # common
        lambda: f"{rng.choice(ENGLISH[:36])} {rng.choice(ENGLISH[:36])}",   # two words
        lambda: rng.choice(ENGLISH[:36]).upper()[:rng.randint(3, 6)],       # a start, capitals
        lambda: rng.choice(CHINESE),                                        # Chinese, 2-4 characters
        lambda: rng.choice(CHINESE)[:1],                                    # one character
        lambda: f"{rng.choice(CHINESE)} {rng.choice(ENGLISH[:36])}",
        lambda: f"zebra{rng.randint(0, 20)}",                               # rare
        lambda: f"nowhere{rng.randint(0, 99)}",                             # found nowhere
        lambda: rng.choice(["of", "to", "an", "%", "_"]),                   # short: no trigram
        lambda: " ".join(rng.choice(ENGLISH[:36]) for _ in range(3)),
    )
    return [rng.choice(shapes)() for _ in range(count)]


async def fill(target: str, chats: int, messages: int, rng: random.Random) -> str:
    """One user's chats, as rows; the user's id."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine
    postgres = chat_db.is_postgres(target)
    engine = create_async_engine(chat_db.data_layer_url(target))
    user_id = str(uuid.uuid4())
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    async with engine.begin() as db:
        await db.execute(text('INSERT INTO users ("id", "identifier", "metadata", "createdAt") '
                              "VALUES (:id, 'bench', '{}', :at)"), {"id": user_id, "at": start.isoformat()})
        for chat in range(chats):
            thread = str(uuid.uuid4())
            at = start + dt.timedelta(hours=chat)
            await db.execute(text('INSERT INTO threads ("id", "createdAt", "name", "userId", "userIdentifier", '
                                  '"metadata") VALUES (:id, :at, :name, :user, \'bench\', \'{}\')'),
                             {"id": thread, "at": at.isoformat(), "name": sentence(rng)[:60], "user": user_id})
            steps = [{"id": str(uuid.uuid4()), "thread": thread, "kind": "assistant_message" if n % 2 else "user_message",
                      "output": " ".join(sentence(rng) for _ in range(rng.randint(1, 4))) + (FIGURES if n % 2 else ""),
                      "metadata": '{"kind": "reply"}' if n % 2 else "{}",
                      "at": (at + dt.timedelta(seconds=n)).isoformat()} for n in range(messages)]
            metadata = "CAST(:metadata AS JSONB)" if postgres else ":metadata"
            await db.execute(text('INSERT INTO steps ("id", "name", "type", "threadId", "streaming", "metadata", '
                                  f'"output", "createdAt") VALUES (:id, \'bench\', :kind, :thread, false, {metadata}, '
                                  ':output, :at)'), steps)
    await engine.dispose()
    return user_id


def folded_scan(threads: list[dict], words: list[str]) -> list[dict]:
    """The search before the index (app/kept/chat_search.py until it had one), as it matched."""
    from app.kept.search_index import folded, searched_text
    found = []
    for thread in threads:
        texts = [thread.get("name") or ""] + [t for t in map(searched_text, thread.get("steps") or []) if t is not None]
        haystack = "\n".join(folded(t) for t in texts)
        if all(word in haystack for word in words):
            found.append(thread)
    return found


async def measure(target: str, args, rng: random.Random) -> dict:
    from chainlit.types import Pagination, ThreadFilter

    from app.kept import search_index
    from app.kept.chat_search import SearchingLayer, page, query_words
    from app.kept.saved_chats import data_layer
    chat_db.prepare_db(target)
    user_id = await fill(target, args.chats, args.messages, rng)
    started = time.perf_counter()
    await asyncio.to_thread(search_index.build, target, lambda line: None)
    built_s = time.perf_counter() - started
    asked = queries(random.Random(SEED + 1), args.queries)
    layer = data_layer(target, SearchingLayer)
    index_ms, scan_ms, found = [], [], []
    try:
        for query in asked[:5]:  # warm: the pool's connections, the first plans
            await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user_id, search=query))
        cpu_started = time.process_time()
        for query in asked:
            started = time.perf_counter()
            await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user_id, search=query))
            index_ms.append(1000 * (time.perf_counter() - started))
        index_cpu_ms = 1000 * (time.process_time() - cpu_started) / len(asked)
        for query in asked[:args.scan_queries]:
            words = query_words(query)
            started = time.perf_counter()
            scanned = folded_scan(await layer.get_all_user_threads(user_id=user_id) or [], words)
            page(scanned, Pagination(first=20))
            scan_ms.append(1000 * (time.perf_counter() - started))
            indexed = await search_index.found_chats(layer, user_id, words)
            if {t["id"] for t in scanned} != set(indexed):
                raise SystemExit(f"{query!r}: the index found {len(indexed)} chats, the scan {len(scanned)}")
            found.append(len(scanned))
    finally:
        await layer.engine.dispose()
    return {"built_s": built_s, "index": index_ms, "scan": scan_ms, "found": found,
            "index_cpu_ms": index_cpu_ms, "load": os.getloadavg()[0]}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def run_backend(backend: str, args) -> dict:
    rng = random.Random(SEED)
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            return asyncio.run(measure(str(Path(folder) / "chats.db"), args, rng))
    from server.stack.processes import free_port
    from tests.support import postgres
    for server in postgres.serve(free_port()):
        return asyncio.run(measure(server.new_database(), args, rng))
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000, help="the user's chats (default 1000)")
    parser.add_argument("--messages", type=int, default=20, help="steps per chat (default 20)")
    parser.add_argument("--queries", type=int, default=200, help="queries through the index (default 200)")
    parser.add_argument("--scan-queries", type=int, default=50,
                        help="of them through the scan, each checked against the index (default 50)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite,postgres (default both)")
    args = parser.parse_args()
    print(f"{args.chats} chats x {args.messages} messages of one user; {args.queries} queries "
          f"({args.scan_queries} also scanned); {os.cpu_count()} CPUs")
    print(f"{'backend':<11}{'search':<8}{'queries':>8}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}")
    for backend in args.backends.split(","):
        result = run_backend(backend, args)
        for method in ("index", "scan"):
            took = result[method]
            print(f"{backend:<11}{method:<8}{len(took):>8}{statistics.median(took):>9.1f}"
                  f"{percentile(took, 0.95):>9.1f}{max(took):>9.1f}")
        print(f"{backend:<11}index built in {result['built_s']:.1f} s; the scanned queries found "
              f"{min(result['found'])}-{max(result['found'])} chats, the same as the index; this "
              f"process's CPU per indexed query {result['index_cpu_ms']:.1f} ms (with SQLite, the "
              f"query's too); load average {result['load']:.1f}")


if __name__ == "__main__":
    main()
