"""The project's own failures: one base class, so every command catches one thing.

A failure the person running the command can fix (a bad setting, a port in use,
a model that cannot be found, a load test that cannot be built) is raised as a
subclass of :class:`ErnieChatError`, with a message that says what was wrong and
what to do.  ``server.cli`` prints that message, without a traceback, and exits with
``exit_code``; a traceback means a bug, never a user mistake.

    ErnieChatError
    ├── BadInput             a file or value given to a command cannot be used
    │   ├── MissingFile      a file or folder named by the user does not exist
    │   ├── NoSuchUser       server.data_life: export-user or delete-user of an unknown name
    │   └── PersonasFileError server.personas_file: a personas file the chat cannot show
    ├── SettingsError        server.settings: a bad ERNIE_* value or .env line
    ├── ChatDbError          server.chat_db: the saved-chats database cannot be used
    ├── AuthStoreError       server.auth_store: the login store cannot be used
    ├── OidcError            server.oidc_discovery: the sign-in provider cannot be used
    ├── ModelConfigNotFound  server.plan.model_config: no config.json for the model
    ├── StepFailed           server.progress: a set-up step (pip, the demo build) failed
    │   └── TorchNotFound    server.stack.provision: no index has the pinned CPU torch
    ├── EngineUnsupported    server.stack.platforms: no vLLM build for this machine
    ├── StartupFailed        server.stack.engine_tier: the stack could not start
    ├── BalancerMissing      server.stack.balancer: HAProxy is needed and not installed
    ├── TlsError             server.stack.tls: the chat's certificate or key cannot be used
    ├── RuntimeApiError      server.stack.balancer_runtime: HAProxy's admin socket failed
    ├── RestartRefused       server.stack.rolling: no restart without downtime as asked
    ├── RestartError         server.stack.restart_control: no running stack to restart
    ├── DataLifeError        server.data_life: a backup, restore, export or deletion refused
    └── LoadTestError        server.loadtest: a load test that cannot run as asked
        ├── BenchError       bench
        ├── TuneError        tune
        ├── QaLoadError      qa-load
        ├── UsersError       simulated users (qa-load --users)
        ├── KillError        qa-load --kill: a part that cannot be named or found
        └── CapacityError    capacity

Signals (``Shutdown``) and the chat's own refusals (``app.conversation.history.TooLong``) are
not failures of a command and are not in this tree.  tests/unit/test_architecture.py checks
that the tree above is the classes' real one.
"""

from __future__ import annotations


class ErnieChatError(Exception):
    """A failure with a message meant for the person who ran the command."""

    exit_code = 2
    # Printed before the message; a settings report starts with its own headline.
    prefix = "ERROR: "

    def render(self) -> str:
        return f"{self.prefix}{self}"


class BadInput(ErnieChatError, ValueError):
    """Something the user handed to a command (a file, a value) cannot be used."""


class MissingFile(BadInput, FileNotFoundError):
    """A file or folder the user named does not exist."""


class LoadTestError(ErnieChatError):
    """A load test (bench, tune, qa-load) that cannot be run as asked."""
