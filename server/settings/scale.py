"""Processes of each tier (API servers, engine copies, app workers) and several machines."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field


class ScaleSettings(BaseModel):
    api_servers: Optional[int] = Field(
        None, ge=1, le=64,
        description="vLLM API server processes per engine copy (--api-server-count). Unset: "
        "chosen from the machine (1 on a CPU machine; on a GPU machine a quarter of the cores, "
        "at most 4, and 2 each for 3 copies on 16 cores). One API server process is the limit of "
        "a small model on a big GPU.",
    )
    engine_copies: Optional[int] = Field(
        None, ge=1, le=16,
        description="Copies of the engine on each GPU, each with its share of the memory, behind "
        "one balancer (HAProxy). One engine core process cannot keep a big GPU busy with a model "
        "this small, so unset, `up` runs 3 where the machine has 16 cores or more and the model's "
        "weights are small beside the GPU (it prints why), else 1; `ernie-chat plan` shows each "
        "copy's KV pool.",
    )
    app_workers: Optional[int] = Field(
        None, ge=1, le=64,
        description="Chainlit worker processes behind one balancer (HAProxy). Unset: chosen from "
        "the machine (1 on a CPU machine; on a GPU machine half the cores, at most 8). "
        "One worker streams about 10k tokens/s.",
    )
    drain_timeout_s: float = Field(
        300.0, ge=1, le=3600,
        description="`ernie-chat restart`: how long to wait for the replies an engine copy or an "
        "app worker is streaming to end before it is stopped anyway. Long enough for the "
        "longest reply the engine writes.",
    )
    warmup: bool = Field(
        True, description="Before the chat URL is printed, send the engine requests like the "
        "app's (streaming, its sampling settings, /tokenize), so the first users do not pay for "
        "run-time compilation.",
    )
    engine_process_start: Literal["auto", "fork", "spawn"] = Field(
        "auto",
        description="How vLLM starts its engine core and API server processes "
        "(VLLM_WORKER_MULTIPROC_METHOD). fork inherits the first process's imports instead of "
        "importing vLLM again in each; auto: fork, except spawn for data parallelism on a CPU.",
    )
    data_parallel_size: int = Field(
        1, ge=1, le=1024,
        description="Engine copies on GPUs of this and other machines, in one vLLM server whose "
        "API servers spread the requests (--data-parallel-size). Each GPU holds ERNIE_ENGINE_COPIES "
        "such servers.",
    )
    data_parallel_size_local: Optional[int] = Field(
        None, ge=1, le=64,
        description="Of those, the copies on this machine, one per GPU (--data-parallel-size-local). "
        "Unset: all of them (one machine).",
    )
    data_parallel_address: Optional[str] = Field(
        None, description="Address of the head machine that the other machines' engine copies "
        "connect to (--data-parallel-address); it must be reachable from them.",
    )
    data_parallel_rpc_port: int = Field(
        29550, ge=1, le=65535,
        description="Port on the head for the engine copies of other machines "
        "(--data-parallel-rpc-port; the Nth copy per GPU uses this port + N). Open it to those "
        "machines only: vLLM does not authenticate it.",
    )
    node_role: Literal["head", "engines"] = Field(
        "head", description="head: API servers, balancer and chat (and engine copies). engines: "
        "only engine copies for a head elsewhere (vllm serve --headless), no chat.",
    )
    data_parallel_start_rank: Optional[int] = Field(
        None, ge=0, description="On an engines machine: the rank of its first copy "
        "(--data-parallel-start-rank), i.e. how many copies the machines before it run.",
    )

    @property
    def copies_per_gpu(self) -> int:
        """ERNIE_ENGINE_COPIES, or one where nothing chose (`up` chooses on a GPU box before
        anything reads this: server/plan/engine_copies.py)."""
        return self.engine_copies or 1

    def problems(self) -> list[str]:
        local = self.data_parallel_size_local
        if local is not None and local > self.data_parallel_size:
            return [f"ERNIE_DATA_PARALLEL_SIZE_LOCAL={local} is more than ERNIE_DATA_PARALLEL_SIZE="
                    f"{self.data_parallel_size}: the local copies are part of all copies"]
        spans_machines = local is not None and local < self.data_parallel_size
        if spans_machines and not self.data_parallel_address:
            return ["copies on several machines (ERNIE_DATA_PARALLEL_SIZE_LOCAL < "
                    "ERNIE_DATA_PARALLEL_SIZE) need ERNIE_DATA_PARALLEL_ADDRESS: the head's address, "
                    "reachable from the other machines"]
        if self.node_role == "engines" and (not spans_machines or self.data_parallel_start_rank is None):
            return ["ERNIE_NODE_ROLE=engines runs copies for a head elsewhere: set "
                    "ERNIE_DATA_PARALLEL_SIZE (all copies), ERNIE_DATA_PARALLEL_SIZE_LOCAL (this "
                    "machine's), ERNIE_DATA_PARALLEL_START_RANK and ERNIE_DATA_PARALLEL_ADDRESS (the head)"]
        return []
