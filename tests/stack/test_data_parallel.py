"""For real on this CPU: a head whose second engine copy runs on a "machine" of engine copies
only (`up` with ERNIE_NODE_ROLE=engines: `vllm serve --headless`)."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from server.stack.processes import free_port
from server.stack.vllm_log import engines_ready, read_tail
from tests.support.stack_process import Up

pytestmark = pytest.mark.usefixtures("clean_env")


# --- for real: a head and a machine of engine copies ---------------------------------------------

def test_a_head_serves_with_the_copy_of_an_engines_machine_and_both_stop_cleanly(tmp_path):
    """Two `up`s on this machine stand in for two machines: the head (API server, chat, copy
    rank 0) and an engines node (copy rank 1), joined over TCP on the data-parallel port."""
    rpc = free_port()
    common = dict(ERNIE_DATA_PARALLEL_SIZE="2", ERNIE_DATA_PARALLEL_SIZE_LOCAL="1",
                  ERNIE_DATA_PARALLEL_ADDRESS="127.0.0.1", ERNIE_DATA_PARALLEL_RPC_PORT=str(rpc),
                  ERNIE_KV_CACHE_GIB="0.25", ERNIE_MAX_MODEL_LEN="2048", ERNIE_WARMUP="false")
    head = Up(tmp_path / "head", **common)
    node = None
    try:
        # The README's order: the head, then the other machines. Its own copy loads first, so
        # two vLLMs do not load at once on two cores (a CI run once lost the head's
        # data-parallel coordinator when they did).
        deadline = time.monotonic() + 1200
        while not engines_ready(read_tail(tmp_path / "head" / "llm.log")):
            assert head.proc.poll() is None and time.monotonic() < deadline, head.output()
            time.sleep(1)
        node = Up(tmp_path / "node", ERNIE_NODE_ROLE="engines", ERNIE_DATA_PARALLEL_START_RANK="1", **common)
        node.wait_for(r"^Engines: 1 cop\(ies\) of this machine serve the head at 127\.0\.0\.1", timeout_s=1200)
        head.wait_for(r"^Chat: ", timeout_s=1200)
        head.wait_for(r"^\[engine\] 1 API server process \(as asked", timeout_s=30)  # not one per copy
        url = f"http://127.0.0.1:{head.engine_port}"
        for _ in range(4):
            answer = httpx.post(f"{url}/v1/completions", timeout=120, json={
                "model": "ernie-4.5-0.3b", "prompt": "Hello", "max_tokens": 8})
            assert answer.status_code == 200, answer.text
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        # The head's API server spread the requests over both copies: rank 1 is on the node.
        # A reply may end at the demo model's end of text before its 8 tokens: any reason counts.
        served = {m.group(1) for m in re.finditer(
            r'vllm:request_success_total\{engine="(\d)",[^}]*\} ([1-9])', metrics)}
        assert served == {"0", "1"}, [line for line in metrics.splitlines() if "request_success" in line]
    finally:
        head.stop()
        if node is not None:
            node.stop()
    assert head.proc.returncode == 0 and node.proc.returncode == 0
