"""tests/support/schedule.py: which tests one process must run together, and in what order."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.support.schedule import (Durations, Timeline, busy_share, cpu_times, groups, load_seconds, order,
                                    write_groups)


def test_a_module_with_one_test_on_the_model_pair_goes_whole_to_its_group():
    found = groups([
        ("tests/app/test_admin.py", ["engine", "tmp_path"]),
        ("tests/models/test_live_view.py", ["page_factory"]),
        ("tests/models/test_live_view.py", ["model_pair"]),
        ("tests/models/test_compare_stack.py", ["model_pair", "page_factory"]),
        ("tests/stack/test_scale.py", ["database"]),
        ("tests/unit/test_history.py", []),
    ])
    assert found == {"tests/app/test_admin.py": "tests/app/test_admin.py",  # each process has an engine
                     "tests/models/test_live_view.py": "model-pair",
                     "tests/models/test_compare_stack.py": "model-pair",
                     "tests/stack/test_scale.py": "tests/stack/test_scale.py",
                     "tests/unit/test_history.py": "tests/unit/test_history.py"}


def test_groups_go_longest_first_with_the_fillers_after_the_longest():
    group_of = {"app.py": "engine", "browser.py": "engine", "scale.py": "scale.py", "faults.py": "faults.py",
                "unit_a.py": "unit_a.py", "unit_b.py": "unit_b.py", "new.py": "new.py"}
    seconds = {"app.py": 500, "browser.py": 400, "scale.py": 430, "faults.py": 220, "unit_a.py": 5,
               "unit_b.py": 9}
    ranked = order(group_of, seconds, {"unit_a.py", "unit_b.py"})
    assert ranked == ["engine", "unit_b.py", "unit_a.py", "scale.py", "faults.py", "new.py"]


def test_a_late_group_goes_out_once_the_groups_before_it_add_up_to_its_wait():
    group_of = {"scale.py": "scale.py", "faults.py": "faults.py", "tls.py": "tls.py", "image.py": "image.py",
                "unit_a.py": "unit_a.py"}
    seconds = {"scale.py": 430, "faults.py": 220, "tls.py": 40, "image.py": 300, "unit_a.py": 5}
    late = frozenset({"image.py"})
    assert order(group_of, seconds, {"unit_a.py"}, late, 600) == ["scale.py", "unit_a.py", "faults.py", "image.py",
                                                                  "tls.py"]
    assert order(group_of, seconds, {"unit_a.py"}, late, 0) == ["image.py", "scale.py", "unit_a.py", "faults.py",
                                                                "tls.py"]
    assert order(group_of, seconds, {"unit_a.py"}, late, 10_000)[-1] == "image.py"  # never enough: the end


def test_missing_or_broken_durations_mean_no_preference(tmp_path):
    assert load_seconds(tmp_path / "absent.json") == {}
    (tmp_path / "broken.json").write_text("[1, 2")
    assert load_seconds(tmp_path / "broken.json") == {}
    (tmp_path / "good.json").write_text(json.dumps({"engine": 12.5}))
    assert load_seconds(tmp_path / "good.json") == {"engine": 12.5}


def test_the_seconds_of_each_module_add_up_from_the_reports(tmp_path):
    class Report:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration
    durations = Durations(tmp_path / "durations.json")
    for nodeid, seconds in [("tests/a.py::t", 2.0), ("tests/a.py::t", 0.5), ("tests/b.py::t[a::b]", 9.0)]:
        durations.pytest_runtest_logreport(Report(nodeid, seconds))
    durations.pytest_sessionfinish()
    assert json.loads((tmp_path / "durations.json").read_text()) == {"tests/b.py": 9.0, "tests/a.py": 2.5}


def test_the_groups_file_is_replaced_whole(tmp_path):
    path = tmp_path / "groups.json"
    write_groups(path, {"tests/a.py": "engine"})
    write_groups(path, {"tests/b.py": "engine"})
    assert json.loads(path.read_text()) == {"tests/b.py": "engine"}
    assert [p.name for p in tmp_path.iterdir()] == ["groups.json"]


def test_the_timeline_shows_each_process_its_modules_in_order_from_the_first_test():
    def report(process, nodeid, start, stop):
        return SimpleNamespace(node=SimpleNamespace(gateway=SimpleNamespace(id=process)),
                               nodeid=nodeid, start=start, stop=stop)
    timeline = Timeline(shown_s=10)
    timeline.cpu_at_start = None  # not this machine's figures
    for args in [("gw1", "tests/stack/test_b.py::t", 1030, 1040), ("gw0", "tests/unit/test_a.py::t", 1000, 1005),
                 ("gw0", "tests/unit/test_a.py::u", 1005, 1012), ("gw1", "tests/stack/test_b.py::u", 1041, 1100),
                 ("gw0", "tests/app/test_c.py::t", 1012, 1015)]:  # 3 s: not shown
        timeline.pytest_runtest_logreport(report(*args))
    lines = []
    timeline.pytest_terminal_summary(SimpleNamespace(section=lambda title: lines.append(title),
                                                     write_line=lines.append))
    assert lines[1:] == ["gw0: 0-12 unit/test_a.py", "gw1: 30-100 stack/test_b.py"]


def test_the_cores_busy_share_comes_from_the_idle_ticks_of_proc_stat():
    before = cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    after = cpu_times("cpu  400 0 150 1100 50 0 0 0 0 0\n")
    assert before == (850, 1000) and after == (1150, 1700)
    assert busy_share(before, after) == 1 - 300 / 700
    assert busy_share(after, after) == 0.0


def test_every_folder_of_tests_is_a_tier_the_run_collects_and_marks():
    """A folder of test modules left out of pytest's testpaths is never run by ./scripts/test."""
    import tomllib

    from tests.conftest import TESTS, TIERS
    options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    with_tests = {path.parent.name for path in TESTS.glob("*/test_*.py")}
    assert with_tests == set(TIERS)
    assert options["testpaths"] == [f"tests/{tier}" for tier in TIERS]
    assert [marker.split(":")[0] for marker in options["markers"]] == list(TIERS)
