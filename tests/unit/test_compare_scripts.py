"""The scripts that set `bench` beside `vllm bench serve` (benchmarks/), on real and made-up runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A real compare session on the H200 (8e59b31:benchmarks/gpu/h200/compare-same-prompts/session-a),
# less the per-request CSVs and logs the table does not read.
SESSION = ROOT / "tests" / "data" / "h200-compare-session-a"


def run(script: str, *args) -> str:
    done = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_compare_table_reads_a_real_h200_session():
    lines = run("benchmarks/gpu/compare_table.py", SESSION).splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert list(rows) == ["vllm_tool-101", "ours-201", "ours-202", "vllm_tool-102"]
    # The client's figures are the tools' own results ...
    vllm = json.loads((SESSION / "vllm-101.json").read_text())
    assert float(rows["vllm_tool-101"][1]) == round(vllm["request_throughput"], 2)
    ours = json.loads((SESSION / "ours-202.json").read_text())["levels"][0]["summary"]
    assert float(rows["ours-202"][3]) == round(ours["ttft_ms"]["mean"], 1)
    for cells in rows.values():
        ttft, engine_ttft, e2e, engine_e2e = map(float, (cells[3], cells[4], cells[6], cells[7]))
        # ... the engine's come from vLLM's counters around each run: shorter, never longer.
        assert 0 < engine_ttft < ttft and 0 < engine_e2e < e2e
        # The API server was one busy process: about a core, sampled from /proc.
        assert 0.9 < float(cells[9]) < 1.2


def write_round(folder: Path, n: int, ours_ttft: list[float], vllm_ttft: list[float], rps: tuple) -> None:
    """A round where every reply has 4 tokens after the first, 10 ms apart."""
    records = [{"success": True, "ttft_s": t, "e2e_s": t + 0.04} for t in ours_ttft]
    summary = {"request_throughput": rps[0], "output_throughput": rps[0] * 5,
               "total_token_throughput": rps[0] * 10, "ttft_ms": {"mean": 1000 * sum(ours_ttft) / len(ours_ttft),
               "median": 1000 * sorted(ours_ttft)[len(ours_ttft) // 2]}, "tpot_ms": {"mean": 10.0},
               "itl_ms": {"mean": 10.0}, "e2e_ms": {"mean": 50.0}, "server_ttft_ms_mean": 12.0}
    (folder / f"ours-{n}").mkdir()
    (folder / f"ours-{n}" / "bench.json").write_text(json.dumps(
        {"levels": [{"concurrency": 4, "summary": summary, "records": records}]}))
    (folder / f"vllm-{n}.json").write_text(json.dumps({
        "max_concurrency": 4, "request_throughput": rps[1], "output_throughput": rps[1] * 5,
        "total_token_throughput": rps[1] * 10, "mean_ttft_ms": 20.0, "median_ttft_ms": 20.0,
        "mean_tpot_ms": 10.0, "mean_itl_ms": 10.0,
        "ttfts": vllm_ttft, "itls": [[0.01] * 4 for _ in vllm_ttft]}))


def test_compare_rounds_sets_aside_rounds_with_bunched_replies(tmp_path):
    write_round(tmp_path, 1, [0.02, 0.02], [0.02, 0.02], (10.0, 10.0))
    # Round 2: one of vLLM's replies arrived all at once (first token after 45 of 85 ms).
    write_round(tmp_path, 2, [0.02, 0.02], [0.02, 0.045], (10.0, 5.0))
    write_round(tmp_path, 3, [0.02, 0.02], [0.02, 0.02], (11.0, 10.0))
    # vLLM's counters around its run of round 2 only: 2 requests, 30 ms to first tokens in all.
    (tmp_path / "counters.jsonl").write_text("\n".join(
        json.dumps({"run": run, "ttft": ttft, "e2e": [ttft[0] * 5, ttft[1]], "queue": [0.0, ttft[1]]})
        for run, ttft in (("vllm-2-before", [1.0, 10]), ("vllm-2-after", [1.03, 12]))) + "\n")
    out = run("benchmarks/compare_rounds.py", tmp_path)
    lines = out.splitlines()
    assert lines[2].split()[0] == "2" and "0/2 / 1/2" in lines[2]
    assert lines[2].rstrip().endswith("12.0 / 15.0") and lines[1].rstrip().endswith("12.0 / -")
    assert "+100.0%" in lines[2]                              # 10 against 5 requests/s
    all_rounds, clean = lines[lines.index(next(l for l in lines if "all rounds" in l)) + 1], lines[-1]
    assert "median difference, clean rounds (2):" in out
    assert all_rounds.split()[0] == "+10.0%" and clean.split()[0] == "+5.0%"   # medians of req/s


def write_open_loop_run(folder: Path, run: str, tool: str, ttfts_s: list[float], gap_s: float,
                        queued: bool = True) -> Path:
    """One open-loop run of ``tool`` ('ours' or 'vllm'), arrivals ``gap_s`` apart."""
    if tool == "ours":
        ttft_ms = sorted(1000 * t for t in ttfts_s)
        summary = {"completed": len(ttfts_s), "request_throughput": 1 / gap_s,
                   "mean_interarrival_ms": 1000 * gap_s,
                   "ttft_ms": {"median": ttft_ms[len(ttft_ms) // 2], "mean": sum(ttft_ms) / len(ttft_ms)}}
        path = folder / run / "bench.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"levels": [{"summary": summary}]}))
        return path
    # vLLM's tool: a request that waited for a place in flight starts late; its arrival is
    # its start less its time queued (where the version writes queue times).
    queue = [0.0] * (len(ttfts_s) - 1) + [0.3]
    starts = [i * gap_s + q for i, q in enumerate(queue)]
    data = {"completed": len(ttfts_s), "request_throughput": 1 / gap_s, "ttfts": ttfts_s,
            "errors": [""] * len(ttfts_s), "start_times": starts if queued else [i * gap_s for i in range(len(ttfts_s))]}
    if queued:
        data["queue_times"] = queue
    path = folder / f"{run}.json"
    path.write_text(json.dumps(data))
    return path


def counter_lines(run: str, mean_ttft_s: float, requests: int) -> list[str]:
    """`python -m server.metrics` readings before and after ``run``: histogram (sum, count)."""
    before = {"run": f"{run}-before", "ttft": [1.0, 10], "e2e": [2.0, 10], "queue": [0.0, 10]}
    after = {"run": f"{run}-after", "ttft": [1.0 + mean_ttft_s * requests, 10 + requests],
             "e2e": [3.0, 10 + requests], "queue": [0.0, 10 + requests]}
    return [json.dumps(before), json.dumps(after)]


def test_open_loop_table_sets_each_tools_p50_beside_the_others(tmp_path):
    ours = [write_open_loop_run(tmp_path, f"ours-{n}", "ours", [0.010, 0.011, 0.012], 0.25) for n in (1, 2)]
    theirs = [write_open_loop_run(tmp_path, "vllm-1", "vllm", [0.0104, 0.0114, 0.0124], 0.25),
              write_open_loop_run(tmp_path, "vllm-2", "vllm", [0.0105, 0.0115, 0.0125], 0.25, queued=False)]
    counters = tmp_path / "counters.jsonl"
    counters.write_text("\n".join(counter_lines("ours-1", 0.009, 3) + counter_lines("vllm-1", 0.0095, 3)) + "\n")
    out = run("benchmarks/open_loop_table.py", 4, counters, f"{ours[0]}=ours-1", f"{theirs[0]}=vllm-1",
              f"{ours[1]}=ours-2", f"{theirs[1]}=vllm-2")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("ours-", "vllm-"))}
    assert list(rows) == ["ours-1", "vllm-1", "ours-2", "vllm-2"]
    # ... completed, p50, mean, the engine's own mean, the mean gap between arrivals, req/s
    assert [float(cells[-5]) for cells in rows.values()] == [11.0, 11.4, 11.0, 11.5]
    assert [cells[-3] for cells in rows.values()] == ["9.00", "9.50", "-", "-"]
    # vLLM's arrivals: starts less time queued (0.3 s late for its last request), or its starts.
    assert float(rows["vllm-1"][-2]) == float(rows["vllm-2"][-2]) == 250.0
    # Ours is 11.0 ms against 11.45: 3.9 % less, within 5 %; the two tools' ranges do not overlap.
    assert "-3.9 % (within 5 %); the ranges do not overlap" in out, out
    slower = write_open_loop_run(tmp_path, "vllm-3", "vllm", [0.0120, 0.0130, 0.0140], 0.25)
    out = run("benchmarks/open_loop_table.py", 4, counters, f"{ours[0]}=ours-1", f"{slower}=vllm-3")
    assert "-15.4 % (not within 5 %)" in out, out
