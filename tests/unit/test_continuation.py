"""The request that continues a cut reply, and the choice between retrying, continuing and giving up."""

from app.engine.continuation import continuation_request, next_step, retry_delay_s

ASKED = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to ten."}]


def test_a_continuation_ends_with_the_text_shown_and_asks_vllm_to_continue_it():
    request = continuation_request(ASKED, "one, two, thr", 100, 7, {"temperature": 0.2, "seed": 3})
    assert request.messages == [*ASKED, {"role": "assistant", "content": "one, two, thr"}]
    assert request.max_tokens == 93
    assert request.extra_body == {"temperature": 0.2, "seed": 3, "continue_final_message": True,
                                  "add_generation_prompt": False}
    assert ASKED[-1]["role"] == "user"  # the cut request's messages are not changed


def test_a_continuation_always_asks_for_at_least_one_token():
    assert continuation_request(ASKED, "x", 10, 12).max_tokens == 1


def test_nothing_shown_is_retried_and_text_shown_is_continued():
    assert next_step("unreachable", "", 0, 100, 0.0, 30.0) == "retry"
    assert next_step("loading", "", 0, 100, 5.0, 30.0) == "retry"
    assert next_step("cut", "one, two", 3, 100, 0.0, 30.0) == "continue"
    assert next_step("unreachable", "one, two", 3, 100, 0.0, 30.0) == "continue"


def test_a_reply_cut_after_its_last_token_is_complete():
    assert next_step("cut", "one, two", 100, 100, 0.0, 30.0) == "done"


def test_failures_another_try_cannot_mend_are_not_retried():
    for kind in ("timeout", "bad_request", "auth", "model_missing", "too_long", "engine_error", "internal"):
        assert next_step(kind, "", 0, 100, 0.0, 30.0) == "give_up", kind
        assert next_step(kind, "text", 2, 100, 0.0, 30.0) == "give_up", kind


def test_the_wait_for_an_engine_is_bounded():
    assert next_step("unreachable", "", 0, 100, 30.0, 30.0) == "give_up"
    assert next_step("cut", "text", 2, 100, 31.0, 30.0) == "give_up"
    assert next_step("unreachable", "", 0, 100, 0.0, 0.0) == "give_up"  # a wait of 0: no retry


def test_the_first_retry_is_at_once_then_the_pauses_double_up_to_a_cap_and_the_time_left():
    assert [retry_delay_s(n, 60.0) for n in range(1, 7)] == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert retry_delay_s(5, 1.5) == 1.5
    assert retry_delay_s(3, -1.0) == 0.0
