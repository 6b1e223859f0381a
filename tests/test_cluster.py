"""efa_stack.cluster: the one polling helper, API error mapping and MPIJob reads, with fakes (no network)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from efa_stack import cluster
from efa_stack.errors import UserError
from tests.test_verify import Clock, FakeCustom, job


def test_poll_probes_once_with_no_time_left() -> None:
    clock = Clock()
    calls: list[int] = []

    def probe() -> int:
        calls.append(1)
        return len(calls)

    result, done = cluster.poll(probe, lambda n: n > 5, timeout=0, interval=10, clock=clock, sleep=clock.sleep)
    assert (result, done, clock.slept) == (1, False, [])


def test_poll_sleeps_the_interval_and_never_past_the_deadline() -> None:
    clock = Clock()
    result, done = cluster.poll(lambda: clock.now, lambda _: False, timeout=25, interval=10,
                                clock=clock, sleep=clock.sleep)
    assert clock.slept == [10, 10, 5] and done is False and result == 1025.0


def test_poll_stops_as_soon_as_done() -> None:
    clock = Clock()
    seen = iter([1, 2, 3])
    result, done = cluster.poll(lambda: next(seen), lambda n: n == 2, timeout=600, interval=10,
                                clock=clock, sleep=clock.sleep)
    assert (result, done, clock.slept) == (2, True, [10])


@pytest.mark.parametrize(
    ("exc", "said", "fix"),
    [
        (ApiException(status=403, reason="Forbidden"), "refused to list nodes (403 Forbidden)", "access entry"),
        (ConnectionError("no route"), "cannot reach the Kubernetes API to list nodes", "--context"),
        (ApiException(status=500, reason="Internal"), "failed to list nodes (500 Internal)", ""),
    ],
)
def test_api_errors_become_user_errors_with_a_fix(exc: Exception, said: str, fix: str) -> None:
    err = cluster.api_error(exc, "list nodes")
    assert isinstance(err, UserError) and said in err.message and fix in err.fix and err.exit_code == 2


def test_wait_for_job_follows_the_job_to_its_condition() -> None:
    clock = Clock()
    custom = FakeCustom([job("mpijob_running.json"), job("mpijob_succeeded.json")])
    outcome = cluster.wait_for_job(custom, "nccl-tests-p5", "default", timeout=60, interval=5, clock=clock,
                                   sleep=clock.sleep)
    assert outcome.state == "Succeeded" and clock.slept == [5]


def test_wait_for_job_times_out_and_reports_a_vanished_job() -> None:
    clock = Clock()
    outcome = cluster.wait_for_job(FakeCustom([job("mpijob_running.json")]), "j", "default", timeout=12,
                                   interval=5, clock=clock, sleep=clock.sleep)
    assert outcome.state == "Timeout" and clock.slept == [5, 5, 2]
    gone = cluster.wait_for_job(FakeCustom([ApiException(status=404, reason="Not Found")]), "j", "default",
                                timeout=12, interval=5, clock=clock, sleep=clock.sleep)
    assert gone.state == "NotFound" and "disappeared" in gone.message


def test_get_job_refuses_an_answer_that_is_not_an_object() -> None:
    class Odd:
        def get_namespaced_custom_object(self, *_: Any) -> Any:
            return ["not", "an", "object"]

    with pytest.raises(UserError, match="not an object"):
        cluster.get_job(Odd(), "j", "default")
