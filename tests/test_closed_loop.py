"""Closed-loop clients (core/engine/clients.py): N users, each sending its next request when its
previous one has finished and it has thought for a while; and vLLM's rate with a cap on requests in
flight. Each test checks what queueing physics demands of such a loop, or what a benchmark user
would see; none compares against the simulator's own earlier output."""
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.cli.main import main
from core.serving import benchfile, frontier, replay
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

FIXTURES = Path(__file__).parent / "fixtures" / "bench"


def closed(users, n, think=0.0, dist="fixed", rate=math.inf, **spec):
    spec = dict(dict(prompt_mean=512, output_mean=128, length_dist="lognormal", spread=0.5), **spec)
    return SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", max_batched_tokens=2048,
                     workload=WorkloadSpec(n_requests=n, rate=rate, concurrency=users, think_s=think, think_dist=dist,
                                           **spec))


def in_flight_at(req, times):
    """Requests sent and not yet answered at each time (from the per-request arrays)."""
    a, f = np.sort(req["arrival_s"]), np.sort(req["finish_s"])
    return np.searchsorted(a, times, side="right") - np.searchsorted(f, times, side="right")


def steady(req):
    """(throughput in req/s, mean time in the system in s) of the requests finished in the second half
    of the run's sending window, measured from the arrays alone."""
    a, f = req["arrival_s"], req["finish_s"]
    t0, t1 = np.sort(a)[len(a) // 2], a.max()
    done = (f > t0) & (f <= t1)
    return done.sum() / (t1 - t0), float((f - a)[done].mean())


@pytest.mark.parametrize("users", [8, 64])
def test_littles_law_holds_and_no_more_than_n_are_ever_in_flight(users):
    r = simulate(closed(users, 40 * users))
    throughput, e2e = steady(r.requests)
    assert throughput * e2e == pytest.approx(users, rel=0.03)  # L = lambda W, with every user always waiting
    times = np.linspace(0, r.requests["finish_s"].max(), 4000)
    assert in_flight_at(r.requests, times).max() <= users
    assert r.summary["clients"]["in_flight"] == pytest.approx(users, rel=0.03)
    assert r.summary["stable"]  # a closed loop cannot overload


def test_one_user_sees_exactly_what_a_lone_request_sees():
    fixed = dict(length_dist="fixed")
    lone = simulate(replace(closed(1, 1, **fixed), workload=WorkloadSpec(n_requests=1, rate=1.0, prompt_mean=512,
                                                                          output_mean=128)))
    loop = simulate(closed(1, 30, **fixed)).requests
    ttft = lone.requests["first_token_s"][0] - lone.requests["arrival_s"][0]
    e2e = lone.requests["finish_s"][0] - lone.requests["arrival_s"][0]
    tpot = (lone.requests["finish_s"][0] - lone.requests["first_token_s"][0]) / 127
    assert e2e == pytest.approx(ttft + 127 * tpot)
    np.testing.assert_allclose(loop["first_token_s"] - loop["arrival_s"], ttft, rtol=1e-9)
    np.testing.assert_allclose(loop["finish_s"] - loop["arrival_s"], e2e, rtol=1e-9)
    # each request is sent only once the previous answer is complete
    assert (loop["arrival_s"][1:] >= loop["finish_s"][:-1] - 1e-12).all()


def test_throughput_grows_with_users_until_the_batch_slots_are_full():
    cfg = replace(closed(1, 1), max_seqs=64)
    levels = [1, 2, 4, 8, 16, 32, 64]
    tput = [frontier.point(replace(cfg, workload=replace(cfg.workload, n_requests=300)), n)["output_tok_s"]
            for n in levels]
    assert all(b >= a * 0.99 for a, b in zip(tput, tput[1:])), tput
    assert tput[-1] > 8 * tput[0]  # a batch of 64 decodes far more per second than one sequence
    past = frontier.point(replace(cfg, workload=replace(cfg.workload, n_requests=300)), 256)
    assert past["saturates"].startswith("batch slots")  # 256 users, 64 slots: the rest queue
    assert past["ttft_p50_ms"] > 3 * frontier.point(cfg, 64)["ttft_p50_ms"]


def test_a_loop_with_think_time_offers_the_rate_n_over_e2e_plus_z_and_serves_like_that_open_loop():
    users, think = 64, 10.0
    r = simulate(closed(users, 3000, think=think, dist="exponential"))
    throughput, e2e = steady(r.requests)
    expected = users / (e2e + think)
    assert throughput == pytest.approx(expected, rel=0.05)
    open_loop = simulate(replace(r.config, workload=replace(r.config.workload, concurrency=0, rate=expected))).summary
    assert r.summary["tpot_ms"]["p50"] == pytest.approx(open_loop["tpot_ms"]["p50"], rel=0.05)
    assert r.summary["throughput_tok_s"] == pytest.approx(open_loop["throughput_tok_s"], rel=0.08)


def test_a_conversation_waits_for_its_answer_and_finds_its_history_cached():
    r = simulate(closed(8, 240, think=1.0, turns=4, prompt_mean=256, output_mean=64))
    req, wl = r.requests, r.workload
    for c in np.unique(wl.conversation_id)[:20]:
        turns = np.flatnonzero(wl.conversation_id == c)
        assert (req["arrival_s"][turns[1:]] >= req["finish_s"][turns[:-1]] + 1.0 - 1e-9).all()
    assert np.all(np.diff(wl.arrival_s) >= 0)  # results come in the order the requests were sent
    assert r.summary["prefix_hit_rate"] > 0.3  # later turns reuse the earlier turns' KV blocks


def test_a_concurrency_cap_that_never_binds_changes_nothing_and_one_that_binds_holds():
    open_cfg = replace(closed(1, 1), workload=WorkloadSpec(n_requests=400, rate=20.0, prompt_mean=512,
                                                           output_mean=128, length_dist="lognormal"))
    base = simulate(open_cfg).requests
    loose = simulate(replace(open_cfg, workload=replace(open_cfg.workload, concurrency=400))).requests
    for k in ("arrival_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(base[k], loose[k])
    tight = simulate(replace(open_cfg, workload=replace(open_cfg.workload, concurrency=4)))
    times = np.linspace(0, tight.requests["finish_s"].max(), 4000)
    assert in_flight_at(tight.requests, times).max() <= 4
    assert tight.summary["clients"]["mode"] == "rate+concurrency"
    assert tight.summary["clients"]["saturates"].startswith("the client")  # 20 req/s due, 4 users cannot send it


def test_a_benchmark_run_at_a_fixed_concurrency_is_replayed_at_it():
    raw = json.loads((FIXTURES / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qpsinf.json").read_text())
    raw["max_concurrency"] = 16
    run = benchfile.parse(json.dumps(raw).encode(), "capped.json")[0]
    base = SimConfig(gpu="a100-40gb", model="llama-3.1-70b", tp=8, policy="sarathi", max_batched_tokens=2048)
    cmp = replay.compare(run, base)
    assert cmp.config.workload.concurrency == 16
    times = np.linspace(0, cmp.result.requests["finish_s"].max(), 4000)
    assert in_flight_at(cmp.result.requests, times).max() <= 16
    assert any("capped requests in flight at 16" in n for n in cmp.notes)
    uncapped = replay.compare(benchfile.parse(json.dumps(dict(raw, max_concurrency=None)).encode(), "x.json")[0], base)
    # every request sent at once waits behind the whole run; sixteen at a time wait behind at most fifteen
    assert cmp.result.summary["ttft_ms"]["p50"] < uncapped.result.summary["ttft_ms"]["p50"] / 4


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


SIM = ["simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--requests", "200"]


def test_the_command_line_runs_a_closed_loop_and_says_what_it_is():
    rc, out, _ = cli(*SIM, "--concurrency", "16", "--think-time", "0.5", "--json")
    s = json.loads(out)
    assert rc == 0 and s["clients"]["users"] == 16 and s["clients"]["think_s"] == 0.5
    rc, out, _ = cli(*SIM, "--concurrency", "16")
    assert rc == 0 and "16 users in a closed loop" in out


@pytest.mark.parametrize("args,words", [
    (["--concurrency", "0"], ["concurrent users", "0"]),
    (["--concurrency", "2.5"], ["whole number", "2.5"]),
    (["--concurrency", "-3"], ["concurrent users", "-3"]),
    (["--concurrency", "4", "--think-time", "nan"], ["think time", "nan"]),
    (["--concurrency", "4", "--think-time", "-1"], ["think time", "-1"]),
    (["--think-time", "2"], ["--concurrency"]),
])
def test_bad_concurrency_or_think_time_is_one_sentence_and_status_2(args, words):
    for command in (SIM, ["plan", "--gpu", "h100", "--model", "llama-3.1-8b"]):
        rc, out, err = cli(*command, *args)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert all(w in err for w in words), err


def test_a_sweep_gives_each_level_and_its_knee_and_refuses_bad_levels(tmp_path):
    rc, out, _ = cli("sweep", "--gpu", "h100", "--model", "llama-3.1-8b", "--concurrency", "1,4,16,64,256",
                     "--max-seqs", "64", "--csv", str(tmp_path), "--json")
    data = json.loads(out)
    assert rc == 0
    points = data["deployments"][0]["points"]
    assert [p["users"] for p in points] == [1, 4, 16, 64, 256]
    per_user = [p["tok_s_per_user"] for p in points]
    # more users: each one slower; past the 64 slots (64 and 256 users) every step runs 64 sequences, and
    # the two speeds differ only by the lengths each level draws (within 2%)
    assert all(b <= a * 1.02 for a, b in zip(per_user, per_user[1:]))
    assert 0 < data["deployments"][0]["knee"] < 4  # past 64 slots, 256 users only queue
    assert (tmp_path / "sweep.csv").read_text().count("\n") >= 6 and (tmp_path / "sweep.json").exists()
    for bad in ("4,2", "1,x", "0,1", ""):
        rc, out, err = cli("sweep", "--gpu", "h100", "--model", "llama-3.1-8b", "--concurrency", bad)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_the_lab_s_export_of_a_closed_loop_says_its_users_and_reproduces_it():
    from core.lab.inputs import LabInputs, current
    from core.serving import export
    x = LabInputs(load="users", users=24, think_s=1.0, requests=300)
    cfg, result = current(x)
    data = json.loads(export.to_json(export.run_dict(result, x.to_dict())))
    assert data["inputs"]["load"] == "users" and data["inputs"]["users"] == 24
    spec = data["deployment"]["workload"]
    assert spec["concurrency"] == 24 and spec["think_s"] == 1.0 and spec["rate"] == "inf"
    again = simulate(replace(cfg, workload=WorkloadSpec(**{**spec, "rate": float(spec["rate"]),
                                                           "rate_schedule": tuple(spec["rate_schedule"])})))
    assert again.summary["ttft_ms"] == result.summary["ttft_ms"]


def test_calibrate_replays_the_file_s_concurrency_cap(tmp_path):
    raw = json.loads((FIXTURES / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qpsinf.json").read_text())
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(dict(raw, max_concurrency=16)))
    rc, out, err = cli("calibrate", str(path), "--gpu", "a100-40gb", "--tp", "8", "--compare-only")
    assert rc == 0, err
    assert "all at once, at most 16 in flight" in out and "capped requests in flight at 16" in out
    def simulated_ttft(*extra):
        rc, out, err = cli("calibrate", str(path), "--gpu", "a100-40gb", "--tp", "8", "--compare-only", "--json",
                           *extra)
        assert rc == 0, err
        return next(r["simulated"] for r in json.loads(out)["comparison"] if r["metric"] == "TTFT median")

    # fewer requests in flight wait behind fewer: --concurrency replaces the file's cap
    assert simulated_ttft("--concurrency", "4") < simulated_ttft() < simulated_ttft("--concurrency", "64")


def test_a_replayed_trace_s_conversations_keep_their_user_in_a_closed_loop():
    rows = [f"{c * 0.1 + t * 5:.2f},{300 * (t + 1)},50,{c}" for c in range(6) for t in range(3)]
    trace = "arrival_s,prompt_tokens,output_tokens,conversation_id\n" + "\n".join(rows) + "\n"
    cfg = replace(closed(2, 18), trace_csv=trace)
    r = simulate(cfg)
    req, conv = r.requests, r.workload.conversation_id
    times = np.linspace(0, req["finish_s"].max(), 2000)
    assert in_flight_at(req, times).max() <= 2
    for c in range(6):
        turns = np.flatnonzero(conv == c)
        assert len(turns) == 3 and (req["arrival_s"][turns[1:]] >= req["finish_s"][turns[:-1]] - 1e-12).all()
    # two users take the conversations in the order they started: the first two, then the next two...
    first_turns = sorted((req["arrival_s"][np.flatnonzero(conv == c)[0]], c) for c in range(6))
    assert [c for _, c in first_turns][:2] == [0, 1]
