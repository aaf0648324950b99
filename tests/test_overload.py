"""Overload is a property of the load against the capacity, not of how long the run is: judged by
requests served against requests offered in the steady state."""
import pytest

from core.lab.inputs import LabInputs
from core.lab.report import lab_view
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


def serial(rate: float, n: int) -> dict:
    spec = WorkloadSpec(n_requests=n, rate=rate, prompt_mean=512, output_mean=128, length_dist="fixed", seed=4)
    return simulate(SimConfig(policy="serial", workload=spec)).summary


@pytest.fixture(scope="module")
def capacity() -> float:
    """One request at a time: the server's capacity is one over the (deterministic) service time,
    read from a run so light that nobody queues."""
    s = serial(0.01, 50)
    return 1.0 / s["e2e_s"]["mean"]


@pytest.mark.parametrize("n", [2000, 20000])
@pytest.mark.parametrize("load, stable", [(0.8, True), (0.95, True), (1.1, False), (2.0, False)])
def test_overload_is_judged_the_same_however_long_the_run(capacity, load, stable, n):
    s = serial(load * capacity, n)
    assert s["stable"] is stable, (load, n, s["served_req_s"], s["offered_req_s"])
    if not stable:  # it serves its capacity, whatever is offered
        assert s["served_req_s"] == pytest.approx(capacity, rel=0.05)


def test_an_overloaded_lab_says_what_is_served_and_that_latencies_grow():
    view = lab_view(LabInputs(rate=44, output_tokens=256))  # 8B on one H100: about 34 req/s of capacity
    miss = "; ".join(view["current_misses"])
    assert "the queue grows without bound" in miss and "req/s served" in miss
    latency = {m["label"]: m for m in view["headline"] if "TTFT" in m["label"] or "TPOT" in m["label"]}
    assert all(m["value"].endswith("and growing") for m in latency.values())
