"""``ernie-chat``: the project's command line (``./scripts/ernie-chat ARGS``).

Each subcommand is one small function over the modules that do the work; the
parser only maps flags onto their arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

from server.errors import ErnieChatError
from server.paths import ROOT
from server.private_files import PRIVATE_UMASK
from server.settings import load_settings

DISTRIBUTION = "ernie-chat"


def project_version() -> str:
    """pyproject.toml's version, the one source of it: read from the checkout the CLI runs in
    (the app's environment does not install the project), else from the installed metadata."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        import tomllib
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    from importlib import metadata
    return metadata.version(DISTRIBUTION)


def cmd_up(args: argparse.Namespace) -> int:
    from server.passwords import plain_warning
    from server.stack import supervisor
    settings = load_settings()
    if warning := plain_warning(settings.user_passwords):
        print(warning, file=sys.stderr)
    return supervisor.run(settings)


def cmd_prepare(args: argparse.Namespace) -> int:
    from server.plan.device import resolve_device
    from server.stack import provision
    settings = load_settings()
    python = provision.prepare_all(settings, resolve_device(settings))
    print(f"[prepare] ready: the engine's Python is {python}; `up` starts without setting up")
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    """Signal the running `up` to restart every process one at a time with the settings as
    `up` would read them now; print its progress until it ends."""
    from server.stack import restart_control
    settings = load_settings()
    pid, request_id = restart_control.request(settings)
    print(f"[restart] asked the supervisor (pid {pid}) to restart with the current settings")
    return 0 if restart_control.follow(settings, pid, request_id) == "done" else 1


def cmd_hash_password(args: argparse.Namespace) -> int:
    """Print the bcrypt hash of a password typed without echo (or one line of stdin)."""
    import getpass

    from server.errors import BadInput
    from server.passwords import hash_password
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise BadInput("The two passwords differ; nothing was hashed. Run the command again.")
    else:  # a script: the first line of stdin, without its line end
        password = sys.stdin.readline().rstrip("\r\n")
    hashed = hash_password(password)
    print(f"{args.user}:{hashed}" if args.user else hashed)
    if sys.stdin.isatty():
        print("Add it to ERNIE_USERS (comma-separated pairs name:hash); in a shell, put the "
              "value in single quotes.", file=sys.stderr)
    return 0


def cmd_revoke_sessions(args: argparse.Namespace) -> int:
    """Sign a user out everywhere: each login of theirs made until now stops working."""
    import asyncio
    import time

    from server.auth_store import open_store
    from server.chat_records import REVOKE_SESSIONS
    from server.data_life import audit
    settings = load_settings()
    store = open_store(settings.chat_db, settings.auth_db)
    now = time.time()

    async def sign_out() -> None:
        try:
            await store.sign_out(args.name, now)
        finally:
            await store.close()
    asyncio.run(sign_out())
    audit.record(settings, REVOKE_SESSIONS, args.name)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    print(f"Signed {args.name} out everywhere: every login of {args.name} made until {when} is "
          f"refused at its next request or reconnect (recorded in {store.where}). Logging in again works.")
    if args.name not in settings.user_passwords:
        print(f"Note: {args.name} is not in ERNIE_USERS, so none of its logins worked anyway; "
              "they now stay refused if the name is added back.", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """The newest audit records of the chat database, newest first."""
    from server.data_life import audit
    from server.errors import BadInput
    records = audit.recent(load_settings(), args.limit)
    if records is None:
        raise BadInput("No audit is kept without saved chats: ERNIE_CHAT_DB is unset (run the "
                       "command with the settings the stack uses).")
    for r in records:
        print(f"{r['at'][:19].replace('T', ' ')}  {r['action']:<15} {r['name'] or '-':<24} "
              f"{r['address']:<16} {r['detail']}")
    if not records:
        print("No audit records yet: the app writes them as people sign in, share and open /admin.")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """Everything a run keeps, into a new folder, while the stack serves."""
    from server.data_life import backup
    from server.data_life.manifest import size_text
    folder = Path(args.dir)
    data = backup.take(load_settings(), folder, project_version())
    total = sum(item["bytes"] for item in data["files"])
    print(f"Backed up {len(data['files'])} file(s), {size_text(total)}, into {folder} "
          f"(manifest.json: sizes and SHA-256). Restore with `ernie-chat restore {folder}`.")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from server.data_life import restore
    restore.put_back(load_settings(), Path(args.dir), force=args.force)
    print("Restored. Start the stack with ./scripts/up.")
    return 0


def cmd_export_user(args: argparse.Namespace) -> int:
    """Everything of one user, as a zip of JSON and Markdown."""
    from server.data_life import user_data
    out = Path(args.out or f"{user_data.slug(args.name)}-export.zip")
    found = user_data.write_export(load_settings(), args.name, out, project_version())
    print(f"Exported {args.name}: {user_data.summary(found.counts())}, into {out} (export.json, "
          "and chats/*.md: each chat to read).")
    return 0


def cmd_delete_user(args: argparse.Namespace) -> int:
    """Remove everything of one user, after a confirmation (or --yes)."""
    from server.data_life import user_data
    from server.errors import BadInput
    settings = load_settings()
    found = user_data.find(settings, args.name)
    user_data.refuse_unknown(found, settings)
    if not args.yes:
        if not sys.stdin.isatty():
            raise BadInput(f"delete-user {args.name} asks for a confirmation and there is no terminal "
                           "to ask on: add --yes to delete without asking.")
        print(f"This removes for good everything of {args.name}: {user_data.summary(found.counts())}; "
              "and signs them out everywhere.")
        if input(f"Type the name ({args.name}) to go on: ").strip() != args.name:
            print("Not confirmed; nothing was removed.")
            return 1
    removed = user_data.delete(settings, args.name)
    print(f"Removed of {args.name}: {user_data.summary(removed)}. Signed out everywhere: their logins "
          "are refused from their next request.")
    if args.name in settings.user_passwords:
        print(f"Note: {args.name} is still in ERNIE_USERS and may log in again: remove the entry "
              "(and restart the stack) to lock them out.", file=sys.stderr)
    return 0


def engine_logs() -> list[Path]:
    """llm.log, or with ERNIE_MODELS each model's (server/stack/model_tiers.py)."""
    from server.stack.model_tiers import model_log_path
    settings = load_settings()
    if not settings.models:
        return [settings.log_file]
    return [model_log_path(settings.log_file, model.served_name) for model in settings.served_models]


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.log:
        return doctor_report(Path(args.log), args)
    settings = load_settings()
    names = [model.served_name if settings.models else None for model in settings.served_models]
    return max(doctor_report(path, args, asleep_line(settings, name) if name else None)
               for path, name in zip(engine_logs(), names))


def doctor_report(path: Path, args: argparse.Namespace, asleep: Optional[str] = None) -> int:
    from server.stack import doctor
    from server.stack.vllm_log import read_tail
    if asleep and not path.exists():
        print(f"No log at {path} yet: its model is {asleep}.")
        return 0
    if not path.exists():
        print(f"No log at {path}: start the stack once (./scripts/up) or pass --log FILE.")
        return 2
    findings = doctor.diagnose(read_tail(path), since_last_start=not args.all)
    if args.json:
        print(json.dumps([{**f.__dict__, "log": str(path)} for f in findings], indent=2))
    elif findings:
        print(f"{len(findings)} problem(s) found in {path}:\n")
        print("\n\n".join(f.render() for f in findings))
    else:
        print(f"No known problem found in {path}.")
    return 1 if findings else 0


def cmd_plan(args: argparse.Namespace) -> int:
    from server.plan import report
    return report.print_plan(args, load_settings())


def asleep_line(settings, served_name: str) -> Optional[str]:
    """What `status` and `doctor` say of a model started on demand and not loaded now."""
    from server.engine_state import read_state
    state = read_state(settings, served_name)
    if state.get("state") != "asleep":
        return None
    took = f", took {state['load_s']:.0f} s to load last time" if state.get("load_s") else ""
    return f"asleep: started on demand, by a chat's first request (ERNIE_MODELS_AT_ONCE){took}"


def cmd_status(args: argparse.Namespace) -> int:
    """The engine's live state from /metrics, once or every few seconds with --watch."""
    import time

    import httpx

    from server.engine_key import engine_key
    from server.metrics import NoEngineStats, fetch_metrics
    settings = load_settings()
    while True:
        for model in settings.served_models:  # with ERNIE_MODELS, each model's engine
            try:
                line = fetch_metrics(model.base_url, engine_key(settings, model.base_url).value).summary()
            except httpx.HTTPError as exc:
                if settings.models and (asleep := asleep_line(settings, model.served_name)):
                    line = asleep
                else:
                    print(f"The engine at {model.base_url} does not answer ({exc}). "
                          "Is ./scripts/up running?")
                    return 1
            except NoEngineStats as exc:
                print(exc)
                return 1
            name = f"{model.served_name}  " if settings.models else ""
            print(f"{time.strftime('%H:%M:%S')}  {name}{line}", flush=True)
        if not args.watch:
            return 0
        time.sleep(args.every)


def cmd_settings(args: argparse.Namespace) -> int:
    """Show the effective settings (secrets masked) and the engine command they give."""
    from server.plan.device import resolve_device
    from server.settings import env_example
    from server.stack.engine_args import engine_command
    if args.env_example:
        print(env_example(), end="")
        return 0
    settings = load_settings()
    shown = settings.model_dump(mode="json")  # SecretStr fields dump as "**********"
    if settings.chat_db:
        from server.chat_db import without_password
        shown["chat_db"] = without_password(settings.chat_db)
    print(json.dumps(shown, indent=2, ensure_ascii=False))
    device = resolve_device(settings)
    if not settings.models:
        command = engine_command(settings, settings.model, device, "python")
        print(f"\nvLLM command on {device}:\n  {command.printable()}")
        return 0
    from server.settings import engine_exposed
    from server.stack.model_tiers import tier_settings
    from server.stack.processes import free_port
    from server.stack.topology import plan_topology
    copies = plan_topology(settings, device, os.cpu_count() or 1, free_port).model_copies
    for model, entry in zip(settings.served_models, settings.model_entries):
        command = engine_command(tier_settings(settings, model, entry.share), model.name, device, "python",
                                 copies[model.served_name])
        print(f"\nvLLM command of {model.served_name} on {device}:\n  {command.printable()}")
    if engine_exposed(settings):
        print(f"\nEach vLLM listens on a loopback port that is free now (`up` picks one again at each "
              f"start); HAProxy listens on each model's port of {settings.engine_host} and asks for "
              "the API key.")
    if device == "cuda":
        print("\nA share not given in ERNIE_MODELS is `up`'s plan (`ernie-chat plan`), not the "
              "--gpu-memory-utilization shown.")
    return 0


def cmd_scrape_config(args: argparse.Namespace) -> int:
    """Prometheus's scrape configuration for this machine's settings (docs/monitoring.md)."""
    from server.stack import dashboard
    from server.stack.scrape_config import render_for
    print(render_for(load_settings()), end="")
    print(f"# Grafana dashboard for these jobs: {dashboard.FILE}", file=sys.stderr)
    return 0


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ernie-chat", description="Self-hosted chat on vLLM: run, plan, diagnose.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {project_version()}",
                        help="print the project's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("up", help="set up and run the engine and the chat app").set_defaults(func=cmd_up)
    sub.add_parser(
        "prepare", help="set up what `up` needs (the engine's environment, demo models) and exit",
        description="Installs vLLM into the engine's environment and builds each demo model the "
        "settings serve, as `up` does before its first start, then exits: for an image's build "
        "step, or to have the first `up` start at once."
    ).set_defaults(func=cmd_prepare)

    sub.add_parser(
        "restart", help="apply new settings without downtime: each engine copy and app worker "
        "in turn", description="Re-reads the settings as `up` does (.env and the environment) and "
        "has the running `up` drain, stop and start each engine copy, then each app worker, one at "
        "a time. Needs ERNIE_ENGINE_COPIES>=2 and ERNIE_APP_WORKERS>=2; refuses settings that "
        "cannot change this way (ports, the number of processes, the model ...). docs/scaling.md."
    ).set_defaults(func=cmd_restart)

    doctor = sub.add_parser("doctor", help="explain failures found in vLLM's log")
    doctor.add_argument("--log", help="log file (default: ERNIE_LOG_FILE, run/llm.log)")
    doctor.add_argument("--all", action="store_true", help="read the whole log, not only the last start")
    doctor.add_argument("--json", action="store_true", help="print findings as JSON")
    doctor.set_defaults(func=cmd_doctor)

    plan = sub.add_parser("plan", help="compute the KV cache: pool, concurrency, profiles",
                          description="KV-cache plan for a model on a device. Defaults come "
                          "from the settings (ERNIE_*); flags override them.")
    plan.add_argument("--model", help="local folder or hub id (baidu/ERNIE-4.5-0.3B-PT works offline)")
    plan.add_argument("--models", metavar="LIST", help="several models on one GPU, "
                      "name[:max_model_len[:share]] comma-separated (default ERNIE_MODELS)")
    plan.add_argument("--at-once", type=positive_int, metavar="N", help="with several models: how "
                      "many run together, the others on demand (default ERNIE_MODELS_AT_ONCE, else all)")
    plan.add_argument("--device", choices=["cuda", "cpu"], help="default: this machine's")
    plan.add_argument("--gpu-memory-gib", type=float, help="plan for a GPU of this size (no GPU needed)")
    plan.add_argument("--gpu-memory-utilization", type=float)
    plan.add_argument("--kv-cache-gib", type=float, help="size the KV pool directly")
    plan.add_argument("--max-model-len", type=int)
    plan.add_argument("--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    plan.add_argument("--max-num-seqs", type=int)
    plan.add_argument("--max-num-batched-tokens", type=int)
    plan.add_argument("--enforce-eager", action="store_true")
    plan.add_argument("--engine-copies", type=int, help="copies of the engine on the device, each "
                      "with its share of the memory (default ERNIE_ENGINE_COPIES)")
    plan.add_argument("--users-per-copy", type=int, metavar="N",
                      help="chat users one engine copy served (`ernie-chat capacity`): how many "
                           "the whole set of copies (per GPU x GPUs x machines) serves")
    plan.add_argument("--concurrency", type=int,
                      help="reverse questions: utilization (or KV GiB) needed for N requests of "
                           "max-model-len, and the longest max-model-len for N requests")
    plan.add_argument("--from-usage", nargs="?", const="", metavar="FILE",
                      help="recommend max-model-len from recorded usage (default ERNIE_USAGE_LOG)")
    plan.add_argument("--reply-room", type=int, help="tokens kept for the reply (default: p99 reply)")
    plan.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    plan.set_defaults(func=cmd_plan)

    status = sub.add_parser("status", help="the engine's live KV use, queue and preemptions")
    status.add_argument("--watch", action="store_true", help="print a line every --every seconds")
    status.add_argument("--every", type=float, default=2.0)
    status.set_defaults(func=cmd_status)

    hashing = sub.add_parser("hash-password", help="hash a login password for ERNIE_USERS",
                             description="Reads the password without echo (twice), or the first "
                             "line of stdin in a script, and prints its bcrypt hash.")
    hashing.add_argument("--user", help="print NAME:HASH, ready for ERNIE_USERS")
    hashing.set_defaults(func=cmd_hash_password)

    revoke = sub.add_parser("revoke-sessions", help="sign a user out on every browser and worker",
                            description="Every login of NAME made until now is refused from its next "
                            "request or reconnect on (logins are kept in ERNIE_AUTH_DB, or in the "
                            "chat database when ERNIE_CHAT_DB is PostgreSQL). To lock NAME out for "
                            "good, also remove it from ERNIE_USERS.")
    revoke.add_argument("name", metavar="NAME", help="the user name, as in ERNIE_USERS")
    revoke.set_defaults(func=cmd_revoke_sessions)

    audit = sub.add_parser("audit", help="the newest audit records: sign-ins, shares, admin views",
                           description="Prints the chat database's newest audit records (ERNIE_CHAT_DB), "
                           "newest first: time (UTC), action, user, client address, detail.")
    audit.add_argument("--limit", type=positive_int, default=50, help="how many (default 50)")
    audit.set_defaults(func=cmd_audit)

    backup = sub.add_parser(
        "backup", help="back up the saved chats, logins and usage into a new folder, while serving",
        description="Copies the saved chats (SQLite's online backup, or pg_dump for PostgreSQL), the "
        "login store and the usage log of the settings (.env, ERNIE_*) into DIR, a new or empty "
        "folder (0700), with manifest.json: sizes and SHA-256. Safe while the stack serves. "
        "docs/operations.md.")
    backup.add_argument("dir", metavar="DIR", help="a new or empty folder")
    backup.set_defaults(func=cmd_backup)

    restore = sub.add_parser(
        "restore", help="put a backup back into the configured places (the stack stopped)",
        description="Checks DIR's manifest (sizes, SHA-256), that `up` is not running and that the "
        "targets hold no data, then restores into ERNIE_CHAT_DB, ERNIE_AUTH_DB and ERNIE_USAGE_LOG.")
    restore.add_argument("dir", metavar="DIR", help="a folder `ernie-chat backup` wrote")
    restore.add_argument("--force", action="store_true", help="replace data the targets hold")
    restore.set_defaults(func=cmd_restore)

    export = sub.add_parser(
        "export-user", help="everything of one user, as a zip of JSON and Markdown",
        description="Their chats with every message, shared links, usage lines and what the "
        "login store keeps of them; never password fingerprints or tokens.")
    export.add_argument("name", metavar="NAME", help="the login name")
    export.add_argument("--out", metavar="FILE", help="the zip to write (default NAME-export.zip)")
    export.set_defaults(func=cmd_export_user)

    delete = sub.add_parser(
        "delete-user", help="remove everything of one user and sign them out everywhere",
        description="Chats (messages, elements, feedback), shared links, limit and login counts, "
        "usage lines and live chat files of NAME; safe while the stack serves.")
    delete.add_argument("name", metavar="NAME", help="the login name")
    delete.add_argument("--yes", action="store_true", help="do not ask for a confirmation")
    delete.set_defaults(func=cmd_delete_user)

    show = sub.add_parser("settings", help="show the effective settings and vLLM command")
    show.add_argument("--env-example", action="store_true", help="print .env.example's text")
    show.set_defaults(func=cmd_settings)

    scrape = sub.add_parser("scrape-config", help="print Prometheus's scrape config for this stack",
                            description="The app's and vLLM's /metrics at the ports of the "
                            "settings (.env and the environment), with the token files they need.")
    scrape.set_defaults(func=cmd_scrape_config)

    from server.loadtest.bench import command as bench  # each tool keeps its own flags
    from server.loadtest.chat import bench_modes, qa_load
    from server.loadtest.lib import cpu
    from server.loadtest.sweep import tune
    from server.loadtest.users import capacity
    bench_modes.add_arguments(bench.add_parser(sub))  # the app measured on bench's load
    tune.add_parser(sub)
    qa_load.add_parser(sub)
    capacity.add_parser(sub)
    cpu.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.umask(PRIVATE_UMASK)  # .env, logs, saved chats: server/private_files.py
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ErnieChatError as exc:  # a failure the user can fix: its message, no traceback
        print(exc.render(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
