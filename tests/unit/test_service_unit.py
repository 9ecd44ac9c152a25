"""deploy/ernie-chat.service, the systemd unit of a host install (docs/operations.md): it runs
the checkout's `up` as an unprivileged user, restarts it on failure and lets it unwind on stop."""

from __future__ import annotations

import configparser
import os

from server.paths import ROOT


def test_the_service_unit_runs_up_as_a_user_and_lets_it_unwind():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(ROOT / "deploy" / "ernie-chat.service")
    service = unit["Service"]
    workdir = service["WorkingDirectory"]
    command = service["ExecStart"].split()[0]
    assert command.startswith(workdir + "/")
    script = ROOT / command[len(workdir) + 1:]
    assert script.is_file() and os.access(script, os.X_OK), script
    assert service["User"] not in ("", "root", "0")
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"  # SIGTERM to `up` alone: it stops its children in order
    assert int(service["TimeoutStopSec"]) >= 60
    assert service["NoNewPrivileges"] == "yes"
    # What would break vLLM on a GPU: hidden devices, no writable-executable memory for the JITs.
    assert "PrivateDevices" not in service and "MemoryDenyWriteExecute" not in service
    assert unit["Install"]["WantedBy"] == "multi-user.target"
