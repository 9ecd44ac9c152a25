"""App against direct in bursts, and where the app's first tokens wait (crowd.sh `clients-both`).

    .venv/bin/python benchmarks/gpu/burst_table.py [FOLDER]   # default: session-1202g/clients-both

FOLDER holds one folder per round (crowd.sh's `burst_round`): `clients-both/r1..r3`, or
`clients-ab/1-aiohttp, 2-httpx, ...` (the chat's HTTP client, aiohttp against httpx). The
folders are in 8e59b31:benchmarks/gpu/h200/ (extract them into the tree with `git archive`:
docs/performance-data.md).

Each round on one stack (1 copy x 4 API servers, 8 workers, 8 tokens per piece): 64 chats at once
through the app (`qa-load --sessions 64`), 64 requests straight to vLLM sampled as the chat samples
(`bench ... --temperature 0.7 --top-p 0.9`), then the same with 1,000 from 4 client processes each
side. Three first-token times per reply:

- the chat's, as its client saw it (qa-load: from sending to the first streamed piece);
- the workers' own, from the app's request to vLLM to the first piece the worker read (the usage
  log, data/usage.jsonl, that every worker appends to; `ttft_s` is `ReplyStats.ttft_s`);
- direct's: bench's request to vLLM, to its first piece.

The chat's minus the workers' is the app's own share: the message's way to its worker and the
handler before the request, then the first piece's way back to the browser (and the client's own
reading). The workers' minus direct's is what the app's requests meet at vLLM that bench's do not.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for its CPU sampler
from crowd_table import chat_rows  # noqa: E402  (this folder's: a gzipped CSV's rows)

from server.loadtest.lib.cpu import busiest, describe, steps, window  # noqa: E402

ROUNDS = Path(__file__).resolve().parent / "h200" / "session-1202g" / "clients-both"
REPLY_TOKENS = 256


def p50_p99(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[int(0.99 * len(ms))]


def app_side(round_dir: Path, name: str) -> tuple[float, list[float]]:
    """(tokens/s until the last reply ended, each chat's TTFT in ms)."""
    chats = chat_rows(round_dir / f"{name}-chats.csv.gz")
    done = [c for c in chats if c["complete"] == "True"]
    rate = REPLY_TOKENS * len(done) / max(float(c["total_s"]) for c in done)
    return rate, [1000 * float(c["ttft_s"]) for c in chats if c["ttft_s"]]


def direct_side(round_dir: Path, name: str) -> tuple[float, list[float]]:
    requests = chat_rows(round_dir / name / "requests.csv.gz")
    rate = sum(int(r["output_tokens"]) for r in requests) / max(
        float(r["start_s"]) + float(r["e2e_ms"]) / 1000 for r in requests)
    return rate, [float(r["ttft_ms"]) for r in requests]


def usage_records(round_dir: Path) -> list[dict]:
    with gzip.open(round_dir / "app-usage.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def workers_side(round_dir: Path) -> list[float]:
    return [1000 * r["ttft_s"] for r in usage_records(round_dir) if r.get("ttft_s") is not None]


def moments(round_dir: Path) -> list[tuple[str, list[float]]]:
    """The 1,000-chat burst on one clock (folders from session-1203b/ on): each chat's
    message sent, reaching a worker's handler, its request to vLLM, the first token at the
    worker, the first token at the client; empty for rounds without the stamps."""
    chats = [c for c in chat_rows(round_dir / "app-chats.csv.gz") if c.get("sent_at")]
    stamps = [r["at"] for r in usage_records(round_dir) if r.get("at")]
    if not chats or not stamps:
        return []
    at = lambda name: [s[name] for s in stamps if s.get(name) is not None]
    return [("sent by the clients", [float(c["sent_at"]) for c in chats]),
            ("at a worker's handler", at("message")),
            ("request to vLLM", at("request")),
            ("first token at the worker", at("first_token")),
            ("first token at the client", [float(c["sent_at"]) + float(c["ttft_s"])
                                           for c in chats if c["ttft_s"]])]


def cpu_samples(round_dir: Path, name: str) -> tuple[int, list[dict]]:
    """(the machine's cores, `cpu-during`'s samples) of one side's burst; none in folders
    before session-1203e/."""
    for path in (round_dir / f"{name}.json", round_dir / f"{name}.json.gz"):
        if path.exists():
            data = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
            return data.get("cores") or 0, data.get("samples") or []
    return 0, []


STEP_GROUPS = ("app workers", "API servers", "engine core", "load clients", "balancer")


def step_lines(samples: list[dict], burst_start: float, of: int) -> list[str]:
    """The app burst's first 600 ms in steps of 100: a second's mean hides that the first
    ~250 ms are the busy ones (docs/performance.md, "Bursts: chats that send at the same instant")."""
    lines = [f"  busy cores, app, by 100 ms: {'ms':>5} {'machine':>8}"
             + "".join(f"{name:>13}" for name in STEP_GROUPS) + f"   (of {of})"]
    for k, step in enumerate(steps(samples, burst_start)):
        if step:
            lines.append(f"  {'':28}{100 * k:>5} {step['machine']:>8.1f}"
                         + "".join(f"{step.get(name, 0):>13.1f}" for name in STEP_GROUPS))
    return lines


def cpu_lines(round_dir: Path, burst_start: float) -> list[str]:
    """The machine's busy cores in the app burst's first second and its first 100-ms steps,
    and in direct's busiest second."""
    lines = []
    of, samples = cpu_samples(round_dir, "cpu-app")
    if samples and (first_s := window(samples, burst_start)):
        lines.append("  " + describe(first_s, "app, the second after the first message", of))
        lines += step_lines(samples, burst_start, of)
    of, samples = cpu_samples(round_dir, "cpu-direct")
    if samples and (peak := busiest(samples)):
        lines.append("  " + describe(peak, "direct, its busiest second", of))
    return lines


def round_dirs(rounds: Path) -> list[Path]:
    """The folders of ``rounds`` that hold a round (crowd.sh's `burst_round`)."""
    return sorted(d for d in rounds.iterdir() if (d / "app-usage.jsonl.gz").exists())


def render_timeline(rounds: Path) -> str:
    """Each moment's p10 / p50 / p90, in ms since the burst's first message was sent."""
    lines = []
    for round_dir in round_dirs(rounds):
        named = moments(round_dir)
        if not named:
            continue
        start = min(named[0][1])
        lines.append(f"{round_dir.name}: ms since the first message of the 1,000, p10 / p50 / p90")
        for name, times in named:
            ms = sorted(1000 * (t - start) for t in times)
            pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
            lines.append(f"  {name:<28}{pick(0.1):>7.0f} /{pick(0.5):>6.0f} /{pick(0.9):>6.0f}   ({len(ms)})")
        lines += cpu_lines(round_dir, start)
    return "\n".join(lines)


def render(rounds: Path = ROUNDS) -> str:
    lines = [f"{'round':<11}{'chats':>6}{'app tok/s':>11}{'direct':>9}{'ratio':>7}"
             f"{'chat TTFT p50/p99':>20}{'workers p50/p99':>18}{'direct p50/p99':>17}{'app over direct p50':>21}"]
    for round_dir in round_dirs(rounds):
        for chats, app_name, direct_name in ((64, "app-64", "direct-64"), (1000, "app", "direct")):
            app, app_ms = app_side(round_dir, app_name)
            direct, direct_ms = direct_side(round_dir, direct_name)
            (a50, a99), (d50, d99) = p50_p99(app_ms), p50_p99(direct_ms)
            workers = f"{'%.0f / %.0f' % p50_p99(workers_side(round_dir))} ms" if chats == 1000 else "-"
            lines.append(f"{round_dir.name:<11}{chats:>6}{app:>11,.0f}{direct:>9,.0f}{app / direct:>7.2f}"
                         f"{f'{a50:.0f} / {a99:.0f} ms':>20}{workers:>18}{f'{d50:.0f} / {d99:.0f} ms':>17}"
                         f"{f'{a50 - d50:+.0f} ms':>21}")
    lines.append("(workers: the app's requests to vLLM, request to first piece, from the usage log; "
                 "crowd.sh kept its lines for the 1,000-chat bursts only)")
    return "\n".join(lines)


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    print(render(folder))
    print(render_timeline(folder))
