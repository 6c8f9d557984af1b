"""reft.plan on the local socket (no reftctl, no operator rights) and the client's retry of a
hello refused because its rank is still joined, against reft_local_testd (whose stand-in
planner answers a one-rank document on node "testd" for a job with a committed step)."""

import os
import threading
import time

import pytest

import reft
from conftest import client, start_daemon, stop_daemon

FOREIGN = "someone-elses-job"


@pytest.fixture
def daemon():
    proc, sock, tmp = start_daemon("reft-py-plan-", {"REFT_TESTD_FOREIGN_JOB": FOREIGN})
    yield sock
    stop_daemon(proc, tmp)


def committed_step(sock, job, step=0):
    """A trainer of `job` (whose hello makes this uid its owner) commits `step`."""
    c = client(sock, job=job)
    c.register("w", bytearray(64))
    c.snapshot(step)
    assert c.wait_committed(step, timeout=10)
    return c


def test_plan_of_own_job(daemon):
    with committed_step(daemon, "py-plan", step=3):
        doc = reft.plan(daemon, "py-plan")
        assert (doc["job"], doc["step"], doc["testd"]) == ("py-plan", 3, True)
        # reftctl is no longer run: the parameter is accepted and ignored.
        assert reft.plan(daemon, "py-plan", reftctl="/nonexistent/reftctl") == doc
    # The trainer is gone; its owner still reads the plan (a launcher between restarts).
    assert reft.plan(daemon, "py-plan")["step"] == 3


def test_plan_errors(daemon, tmp_path):
    with client(daemon, job="py-fresh"):
        with pytest.raises(reft.NotFoundError, match="has no committed step"):
            reft.plan(daemon, "py-fresh")
    with pytest.raises(reft.NotFoundError):
        reft.plan(daemon, "no-such-job")
    with pytest.raises(reft.PermissionDeniedError) as refused:
        reft.plan(daemon, FOREIGN)
    owner = 4242 if os.getuid() == 0 else os.getuid() + 1  # as reft_local_testd claims it
    assert f"uid {owner}" not in str(refused.value)  # a refusal names nothing of the job
    with pytest.raises(reft.UnavailableError):
        reft.plan(str(tmp_path / "no-reftd.sock"), "py-plan")
    with pytest.raises(reft.InvalidArgumentError):
        reft.plan(daemon, "")


def test_elastic_coordinates_through_the_local_socket(daemon):
    # The stand-in planner's document: one rank on node "testd", no node lost.
    with committed_step(daemon, "py-elastic", step=5):
        place = reft.elastic.coordinates(daemon, "py-elastic", rank=0, world_size=1, wait_s=0,
                                         reftctl="/nonexistent/reftctl")
        assert (place.dp, place.tp, place.pp, place.node, place.step) == (1, 1, 1, "testd", 5)
        assert place.policy == "none"
    with pytest.raises(reft.PermissionDeniedError):
        reft.elastic.coordinates(daemon, FOREIGN, rank=0, world_size=1, wait_s=0)


def test_a_rank_joined_twice_is_retried_then_refused(daemon):
    with client(daemon, job="py-twice"):
        start = time.monotonic()
        with pytest.raises(reft.AlreadyExistsError, match="connect_timeout"):
            client(daemon, job="py-twice", connect_timeout=0.5)
        waited = time.monotonic() - start
        assert 0.5 <= waited < 5, waited
        start = time.monotonic()
        with pytest.raises(reft.AlreadyExistsError):
            client(daemon, job="py-twice", connect_timeout=0)
        assert time.monotonic() - start < 0.5
    with pytest.raises(reft.InvalidArgumentError):
        client(daemon, job="py-twice", connect_timeout=-1)


def test_a_rank_joined_twice_joins_once_the_first_closes(daemon):
    first = client(daemon, job="py-restart")
    closer = threading.Timer(0.2, first.close)
    closer.start()
    start = time.monotonic()
    try:
        with client(daemon, job="py-restart", connect_timeout=10) as second:
            assert second is not None
    finally:
        closer.join()
    waited = time.monotonic() - start
    assert 0.15 <= waited < 5, waited
