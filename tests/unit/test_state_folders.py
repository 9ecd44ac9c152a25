"""Where a run leaves its files: what may be lost in run/ (the folder of ERNIE_LOG_FILE), what
must be kept in data/, both ignored by git, so a checkout stays clean after `up`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from server import engine_state, model_wake
from server.paths import ROOT
from server.settings import load_settings
from server.stack import app_tier, metrics_endpoint, model_tiers, restart_control

pytestmark = pytest.mark.usefixtures("clean_env")


def ignored_by_git(path: Path) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode == 0


def test_every_state_file_of_a_run_is_in_run_or_data_and_ignored_by_git():
    settings = load_settings(models="demo,demo-small")
    run = restart_control.run_folder(settings, ROOT)
    files = [settings.log_file, engine_state.state_path(settings), engine_state.state_path(settings, "demo"),
             model_wake.used_path(settings, "demo-small"), restart_control.supervisor_file(run),
             metrics_endpoint.metrics_dir(settings) / "counter_1.db",
             app_tier.worker_log_path(settings.log_file, 0), app_tier.worker_log_path(settings.log_file, 1),
             model_tiers.model_log_path(settings.log_file, "demo"), settings.log_file.with_name("balancer.log"),
             settings.usage_log, settings.auth_db, settings.live_chats_dir / "x.json"]
    top = {Path(f).parts[0] if not Path(f).is_absolute() else Path(f).relative_to(ROOT).parts[0] for f in files}
    assert top == {"run", "data"}, files
    assert [f for f in files if not ignored_by_git(ROOT / f)] == []
