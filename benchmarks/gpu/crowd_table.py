"""The H200 crowd figures (8e59b31:benchmarks/gpu/h200/crowd and the later folders beside it,
made by crowd.sh; extract them into the tree with `git archive`: docs/performance-data.md) as a
table and a plot.

    .venv/bin/python benchmarks/gpu/crowd_table.py            # prints the table
    .venv/bin/python benchmarks/gpu/crowd_table.py --plot docs/gpu-crowd.png

"Before" is main at aaa1fa0 (one Chainlit process, one vLLM API server), measured the same
way on the same kind of machine; its figures are quoted, not re-run.
Every "after" figure is ONE run: a burst of a few seconds, so a difference under ~20 %
between two such figures is not a finding.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its objective
from server.loadtest.users.capacity import Objective  # noqa: E402

HERE = Path(__file__).resolve().parent / "h200" / "crowd"
# The later runs of 2026-12-02 kept per-chat CSVs and bench's text tables (smaller);
# session-1202c's also ran direct sampled as the chat samples (temperature 0.7, top_p 0.9).
LATER_RUNS = (("session-1202b", "crowd-shared", "12-02b: 1 copy, 8 workers, old warm-up"),
              ("session-1202b", "first-crowd", "12-02b: 1 copy, 8 workers, fresh machine"),
              ("session-1202b", "crowd-2copies", "12-02b: 2 copies, 8 workers"),
              ("session-1202c", "profile-crowd", "12-02c: 1 copy, 8 workers, untyped request"),
              *(("session-1202d", f"crowd-repeat/r{n}", f"12-02d: 1 copy, 8 workers, round {n}")
                for n in (1, 2, 3)))
REPLY_TOKENS = 256
BEFORE = [  # (label, chats, app tok/s, direct tok/s, app TTFT p50, p99, direct TTFT p50, p99)
    ("before: 1 worker, 1 API server", 256, 8610, 14772, 4625, 5029, 338, 751),
]


def app_row(run: str, chats: int) -> tuple:
    qa = json.loads((HERE / run / f"qa-{chats}.json").read_text())
    s = qa["summary"]
    return (REPLY_TOKENS * s["complete"] / qa["last_reply_s"], s["ttft_ms"]["median"], s["ttft_ms"]["p99"],
            s["lost"] + s["incomplete"], s["crossed"])


def direct_row(run: str, name: str) -> tuple:
    level = json.loads((HERE / run / f"{name}-bench.json").read_text())["levels"][0]["summary"]
    return level["output_throughput"], level["ttft_ms"]["median"], level["ttft_ms"]["p99"]


def bench_text(path: Path, chats: int) -> tuple[float, float, float]:
    """(output tok/s, TTFT p50, p99) from bench's table row: conc done fail req/s out-tok/s
    tot-tok/s goodput | TTFT mean/p50/p99 | ..."""
    line = next(l for l in path.read_text().splitlines() if l.split()[:1] == [str(chats)])
    cells = line.split("|")
    _, d50, d99 = (float(v) for v in cells[1].split("/"))
    return float(cells[0].split()[4]), d50, d99


def later_row(session: str, run: str, chats: int) -> tuple:
    """(app tok/s, direct tok/s, app TTFT p50, p99, direct p50, p99, losses, direct sampled
    tok/s or None): a row of ``rows`` after its label and chats."""
    where = HERE.parent / session / run
    s = json.loads((where / f"qa-{chats}-summary.json").read_text())
    with gzip.open(where / f"qa-{chats}-chats.csv.gz", "rt") as f:
        last = max(float(c["total_s"]) for c in csv.DictReader(f) if c["total_s"])
    direct, d50, d99 = bench_text(where / f"direct-{chats}.txt", chats)
    sampled = where / f"direct-topp-{chats}.txt"
    return (REPLY_TOKENS * s["complete"] / last, direct, s["ttft_ms"]["median"], s["ttft_ms"]["p99"],
            d50, d99, f"{s['lost'] + s['incomplete']} lost, {s['crossed']} crossed",
            bench_text(sampled, chats)[0] if sampled.exists() else None)


def rows() -> list[tuple]:
    out = [(label, n, app, direct, a50, a99, d50, d99, "-", None) for label, n, app, direct, a50, a99, d50, d99 in BEFORE]
    for run, label in (("warm", "after: 4 workers, 4 API servers, 1 copy"),
                       ("copies2", "after: 4 workers, 4 API servers per copy, 2 copies"),
                       ("crowd8", "12-02: 8 workers, 4 API servers, 1 copy, 8 tokens/piece")):
        for chats in (256, 1000):
            if not (HERE / run / f"qa-{chats}.json").exists():
                continue
            app, a50, a99, lost, crossed = app_row(run, chats)
            direct, d50, d99 = direct_row(run, f"direct-{chats}")
            out.append((label, chats, app, direct, a50, a99, d50, d99, f"{lost} lost, {crossed} crossed", None))
    for session, run, label in LATER_RUNS:
        for chats in (256, 1000):
            out.append((label, chats, *later_row(session, run, chats)))
    return out


def capacity(run: str) -> int:
    return json.loads((HERE / run / "capacity-app" / "capacity.json").read_text())["users_within"]


def later_capacity(session: str, run: str) -> str:
    """Each step of a later folder's capacity search, judged as capacity judges."""
    steps = []
    for step in sorted((HERE.parent / session / run / "capacity-app").glob("users-*-try-*"),
                       key=lambda p: (int(p.name.split("-")[1]), p.name)):
        summary = json.loads(gzip.open(step / "summary.json.gz").read())["summary"]
        ok, why = Objective().check(summary["steady"], summary)
        steps.append(f"{step.name.split('-')[1]} users {'pass' if ok else 'fail: ' + why}")
    return "; ".join(steps)


def repeated() -> list[str]:
    """12-02d's three rounds on one machine: each figure's mean and range, so that a ratio is
    read against the runs' own spread."""
    out = []
    for chats in (256, 1000):
        runs = [later_row("session-1202d", f"crowd-repeat/r{n}", chats) for n in (1, 2, 3)]
        figures = {"app tok/s": [r[0] for r in runs], "direct tok/s": [r[1] for r in runs],
                   "direct sampled tok/s": [r[7] for r in runs],
                   "app / direct sampled": [r[0] / r[7] for r in runs],
                   "app TTFT p50 ms": [r[2] for r in runs], "direct sampled TTFT p50 ms":
                   [bench_text(HERE.parent / "session-1202d" / f"crowd-repeat/r{n}" /
                               f"direct-topp-{chats}.txt", chats)[1] for n in (1, 2, 3)]}
        out.append(f"12-02d, {chats} chats, 3 rounds: " + "; ".join(
            f"{name} {mean_and_range(v)}" for name, v in figures.items()))
    return out


def chat_rows(*paths: Path) -> list[dict]:
    rows_ = []
    for path in paths:
        with gzip.open(path, "rt") as f:
            rows_ += list(csv.DictReader(f))
    return rows_


def p50_p99(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[len(values) // 2]:,.0f} / {values[int(0.99 * len(values))]:,.0f} ms"


def load_clients() -> list[str]:
    """12-02e: 1,000 chats from one qa-load process against four of 250 (crowd-clients), and
    app against direct with four load-client processes on each side (clients-both)."""
    where = HERE.parent / "session-1202e"
    out = []
    for n in (1, 2):
        r = where / "crowd-clients" / f"r{n}"
        for label, names in (("1 client x 1,000", ["one-client"]), ("4 clients x 250", [f"client-{i}" for i in range(1, 5)])):
            chats = chat_rows(*(r / f"{name}-chats.csv.gz" for name in names))
            out.append(f"12-02e crowd-clients r{n}, {label}: app TTFT p50/p99 "
                       f"{p50_p99([1000 * float(c['ttft_s']) for c in chats if c['ttft_s']])}")
    # 12-02f: the same on a fresh machine; the app side is one `qa-load --processes 4`
    for session, r in [("12-02e", where / "clients-both" / f"r{n}") for n in (1, 2)] + [
            ("12-02f", HERE.parent / "session-1202f" / "machine-b" / "clients-both" / f"r{n}") for n in (1, 2)]:
        chats = chat_rows(*sorted(r.glob("app*-chats.csv.gz")))
        done = [c for c in chats if c["complete"] == "True"]
        app = REPLY_TOKENS * len(done) / max(float(c["total_s"]) for c in done)
        direct = chat_rows(*sorted(r.glob("direct*/requests.csv.gz")))  # 4 bench runs, or one of 4 processes
        rate = sum(int(d["output_tokens"]) for d in direct) / max(
            float(d["start_s"]) + float(d["e2e_ms"]) / 1000 for d in direct)
        out.append(f"{session} clients-both {r.name}, 4 clients x 250 each side: app {app:,.0f} tok/s, TTFT p50/p99 "
                   f"{p50_p99([1000 * float(c['ttft_s']) for c in chats if c['ttft_s']])}; direct sampled "
                   f"{rate:,.0f} tok/s, TTFT {p50_p99([float(d['ttft_ms']) for d in direct])}; ratio {app / rate:.2f}")
    return out


def mean_and_range(values: list[float]) -> str:
    digits = 2 if max(values) < 10 else 0  # ratios, or tokens/s and milliseconds
    return f"{sum(values) / len(values):,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"


def render() -> str:
    lines = [f"{'setting':<58}{'chats':>6}{'app tok/s':>10}{'direct':>8}{'ratio':>6}"
             f"{'app TTFT p50/p99':>18}{'direct TTFT p50/p99':>21}{'sampled':>9}{'ratio':>6}  losses"]
    for label, n, app, direct, a50, a99, d50, d99, losses, sampled in rows():
        versus = f"{sampled:>9,.0f}{app / sampled:>6.2f}" if sampled else f"{'-':>9}{'-':>6}"
        lines.append(f"{label:<58}{n:>6}{app:>10,.0f}{direct:>8,.0f}{app / direct:>6.2f}"
                     f"{f'{a50:,.0f} / {a99:,.0f} ms':>18}{f'{d50:,.0f} / {d99:,.0f} ms':>21}{versus}  {losses}")
    lines += ["", *repeated(), "", *load_clients()]
    sustained, _, _ = direct_row("copies2", "direct-sustained")
    lines += ["", f"engine tier alone, 2 copies, 1,024 in flight, 3,072 requests: {sustained:,.0f} output tokens/s",
              f"capacity through the app (TTFT p99 <= 1 s, >= 20 tokens/s for 9 users in 10): "
              f"{capacity('warm')} users with 1 copy, {capacity('copies2')} with 2 (4 workers); "
              f"{capacity('crowd8-cap')} with 1 copy, 8 workers, 8 tokens/piece (the most it tried)",
              f"12-02b, 1 copy, 8 workers: {later_capacity('session-1202b', 'first-crowd')}",
              f"12-02c, 2 copies, 8 workers: {later_capacity('session-1202c', 'cap-2copies')}; "
              f"{later_capacity('session-1202c', 'cap-2copies-4000')}",
              f"12-02c, 1 copy, ERNIE_MAX_NUM_SEQS=2048: {later_capacity('session-1202c', 'cap-seqs')}",
              "(direct 'sampled': bench --temperature 0.7 --top-p 0.9, as every chat request)"]
    return "\n".join(lines)


def plot(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = rows()
    short = {"before": "before\n1 worker\n1 API server", "1 copy": "after, 1 copy\n4 workers\n4 API servers",
             "2 copies": "after, 2 copies\n4 workers\n4 API servers",
             "tokens/piece": "12-02, 1 copy\n8 workers\n8 tokens/piece",
             "old warm-up": "12-02b, 1 copy\n8 workers\nold warm-up", "fresh machine": "12-02b, 1 copy\nfresh machine\nnew warm-up",
             "12-02b: 2 copies": "12-02b, 2 copies\n8 workers\n8 tokens/piece",
             "untyped request": "12-02c, 1 copy\n8 workers\nuntyped request",
             **{f"round {n}": f"12-02d, 1 copy\n8 workers\nround {n}" for n in (1, 2, 3)}}
    labels = [next(v for k, v in reversed(short.items()) if k in label) + f"\n{n} chats"
              for label, n, *_ in data]
    fig, (left, right) = plt.subplots(2, 1, figsize=(16, 10))
    x = range(len(data))
    left.bar([i - 0.27 for i in x], [r[2] for r in data], 0.27, label="through the app")
    left.bar(list(x), [r[3] for r in data], 0.27, label="straight to vLLM")
    left.bar([i + 0.27 for i in x], [r[9] or 0 for r in data], 0.27,
             label="straight to vLLM, sampled as the chat (12-02c on)")
    left.set_ylabel("generated tokens/s")
    left.set_title("What the chat app carries (H200, ERNIE-4.5-0.3B shape)")
    right.bar([i - 0.2 for i in x], [r[4] for r in data], 0.4, label="app TTFT p50")
    right.bar([i + 0.2 for i in x], [r[5] for r in data], 0.4, label="app TTFT p99")
    right.axhline(1000, color="grey", linestyle="--", linewidth=1, label="1 s")
    right.set_ylabel("ms")
    right.set_title("Time to first token through the app")
    for ax in (left, right):
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    print(render())
    if args.plot:
        plot(args.plot)
        print(f"wrote {args.plot}")
