"""tune's users objective (server/loadtest/sweep/users_runs.py): a user run as a sweep run, and
the choice that takes only points whose every run kept the objective."""

from __future__ import annotations

import pytest

from server import cli
from server.errors import LoadTestError
from server.loadtest.sweep import choice as tune_choice
from server.loadtest.sweep import results as tune_results
from server.loadtest.sweep import tune
from server.loadtest.sweep.choice import Outcome, Point, TuneError
from server.loadtest.sweep.users_runs import UsersLoad, run_summary
from server.loadtest.users.capacity import Objective
from server.loadtest.users.model import ReplyRecord, UserModel, UserRecord
from server.loadtest.users.report import result_from
from tests.support.tune_runs import summary

LOAD = UsersLoad(4, Objective(1000.0, 20.0), think_s=3, ramp_s=10, step_s=60)


def user_run(*replies: ReplyRecord) -> dict:
    """The JSON a user run leaves, made by the users package's own summary."""
    model = UserModel(users=4, turns=0, think_s=3, ramp_s=10, window_s=70)
    users = [UserRecord(u, arrived_s=2.5 * u, opened_s=2.5 * u + 0.1, left_s=80) for u in range(4)]
    return result_from(model, users, list(replies), [], 80.0, "http://127.0.0.1:8000/v1", "engine")


def reply(user: int, sent_s: float, ttft_s: float, total_s: float, tokens: int = 101,
          error: str = "") -> ReplyRecord:
    return ReplyRecord(user, 0, sent_s, ttft_s, total_s, tokens, complete=not error, error=error)


def test_a_user_run_counts_its_steady_replies_that_met_the_objective():
    result = user_run(
        reply(0, 1.0, 5.0, 9.0),      # sent during the ramp: not measured
        reply(0, 20.0, 0.2, 5.2),     # 100 tokens after the first in 5 s: 20 tokens/s, TTFT 200 ms
        reply(1, 21.0, 0.3, 4.3),     # 25 tokens/s
        reply(2, 22.0, 1.5, 6.5),     # TTFT 1.5 s: not within
        reply(3, 30.0, 0.2, 10.2),    # 10 tokens/s: not within
        reply(1, 75.0, 0.1, 2.1))     # after the send window: not measured
    level, missed = run_summary(result, LOAD)
    assert (level.requests, level.completed, level.total_output_tokens) == (4, 4, 404)
    assert level.goodput == pytest.approx(2 / 60)  # replies/s that met TTFT and TPOT <= 50 ms
    assert level.slo.ttft_ms == 1000 and level.slo.tpot_ms == pytest.approx(50)
    assert level.ttft_ms.p99 > 1000 and missed.startswith("TTFT p99 ")  # capacity's own verdict


def test_a_lost_reply_misses_the_objective_however_fast_the_rest():
    result = user_run(reply(0, 20.0, 0.1, 2.1), reply(1, 21.0, 0.1, 2.1),
                      reply(2, 22.0, None, 120.0, tokens=0, error="no reply in 120 s"))
    level, missed = run_summary(result, LOAD)
    assert missed == "lost, failed or crossed replies" and level.failed == 1
    fast = run_summary(user_run(reply(0, 20.0, 0.1, 2.1), reply(1, 21.0, 0.1, 2.1)), LOAD)
    assert fast[1] == "" and fast[0].goodput == pytest.approx(2 / 60)


def users_point(copies: int, *goodputs: float, missed: tuple[str, ...] = ()) -> Outcome:
    return Outcome(Point.of(max_model_len=2048, engine_copies=copies), status="measured",
                   served_max_model_len=2048, runs=[summary(g) for g in goodputs],
                   missed=list(missed) or [""] * len(goodputs))


def test_the_choice_takes_only_points_that_kept_every_run_within_the_objective(tmp_path):
    fast_but_missed = users_point(3, 30.0, 31.0, 32.0, missed=("", "TTFT p99 1204 ms > 1000", ""))
    within = users_point(2, 20.0, 21.0, 22.0)
    outcomes = [fast_but_missed, within]
    assert tune_choice.choose(outcomes, 2048) is within
    text = tune_choice.explain(within, outcomes, 2048, "--need-max-model-len")
    assert "1 point(s) missed the users objective in a run: len 2048, engine_copies=3: TTFT p99 1204" in text
    table = tune_choice.render_table(outcomes, within).splitlines()
    assert table[2].endswith("missed the objective in 1/3 runs: TTFT p99 1204 ms > 1000")
    assert table[3].endswith("chosen")
    roles = [row["role"] for row in tune_choice.plot_rows(outcomes, within, 2048)]
    assert roles == ["missed the objective", "chosen"]
    # tune.json keeps each run's verdict: a resumed sweep judges it the same way.
    header = {"model": "m", "labels": [o.point.label() for o in outcomes]}
    tune_results.write(tmp_path, header, outcomes)
    fresh = [Outcome(o.point) for o in outcomes]
    assert tune_results.take_done(tmp_path, header, fresh, repeats=3) == 2
    assert fresh[0].missed == fast_but_missed.missed and tune_choice.choose(fresh, 2048).point == within.point


def test_no_point_within_the_objective_names_the_closest_and_what_to_try():
    outcomes = [users_point(1, 9.0, 9.0, missed=("TTFT p99 3105 ms > 1000", "TTFT p99 3541 ms > 1000")),
                users_point(2, 12.0, 12.0, missed=("", "per-user tokens/s p10 18.2 < 20"))]
    with pytest.raises(TuneError, match=r"No point kept every run within the users objective; the "
                                        r"closest, len 2048, engine_copies=2, missed it in 1 of 2 runs "
                                        r"\(per-user tokens/s p10 18.2 < 20\)\. Fewer --users"):
        tune_choice.choose(outcomes, 2048)


def parse(*argv):
    return cli.build_parser().parse_args(["tune", *argv])


def test_users_replace_the_bench_load_and_bad_numbers_are_refused_before_any_start():
    args = parse("--users", "3000", "--processes", "4", "--step-s", "90")
    load = tune.users_load(args)
    assert (load.users, load.processes, load.run_s, args.concurrency) == (3000, 4, 100.0, (3000,))
    assert "3000 users (think 3 s, ramp 10 s, steady 90 s) within TTFT p99 <= 1000 ms" in load.describe()
    assert tune.users_load(parse()) is None
    with pytest.raises(TuneError, match="--concurrency is the bench load's"):
        tune.users_load(parse("--users", "10", "--concurrency", "8"))
    with pytest.raises(LoadTestError, match="--users must be between 1 and 4000"):
        tune.users_load(parse("--users", "5000"))
    with pytest.raises(TuneError, match="--step-s must be positive"):
        tune.users_load(parse("--users", "10", "--step-s", "0"))
