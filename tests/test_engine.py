"""The serving engine: invariants over random workloads, queueing theory, and the published shapes."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.engine.layout import P_USED
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

POLICIES = ["serial", "static", "orca", "vllm", "sarathi"]


def run(**kw):
    wl = kw.pop("workload", None) or WorkloadSpec(**kw.pop("wl", {}))
    return simulate(SimConfig(workload=wl, **kw))


@st.composite
def scenarios(draw):
    policy = draw(st.sampled_from(POLICIES))
    # a small GPU with a tight KV pool, so that blocks run out and preemption happens
    mem_util = draw(st.floats(0.8, 0.92))
    dist = draw(st.sampled_from(["fixed", "uniform", "exponential", "lognormal", "sharegpt"]))
    wl = WorkloadSpec(n_requests=draw(st.integers(1, 150)), rate=draw(st.floats(0.5, 200)),
                      arrival=draw(st.sampled_from(["poisson", "gamma", "fixed"])), cv=draw(st.floats(0.5, 4)),
                      prompt_mean=draw(st.floats(1, 600)), output_mean=draw(st.floats(1, 400)),
                      length_dist=dist, seed=draw(st.integers(0, 10_000)))
    return dict(gpu="l4", model="llama-3.1-8b", policy=policy, mem_util=mem_util, workload=wl,
                block_size=draw(st.sampled_from([1, 8, 16, 32])), max_seqs=draw(st.integers(1, 64)),
                max_batched_tokens=draw(st.integers(64, 4096)), chunk=draw(st.integers(16, 1024)),
                max_model_len=1024)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_over_random_workloads_and_knobs(kw):
    r = run(**kw)
    q = r.requests
    # every request finishes, once, with exactly its output tokens
    assert (q["finish_s"] > 0).all()
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    # times are ordered
    assert (q["arrival_s"] <= q["scheduled_s"]).all()
    assert (q["scheduled_s"] <= q["first_token_s"]).all()
    assert (q["first_token_s"] <= q["finish_s"]).all()
    # blocks in use never exceed the pool and never go negative
    s = r.summary
    assert 0 <= s["peak_kv_blocks_used"] <= s["kv_blocks_total"]
    assert s["min_free_kv_blocks"] >= 0
    assert (r.trace["kv_blocks_used"] >= 0).all() and (r.trace["kv_blocks_used"] <= s["kv_blocks_total"]).all()
    assert (r.trace["kv_slots_empty"] >= 0).all()
    # only paged policies preempt; reservation never needs to
    if kw["policy"] in ("serial", "static", "orca"):
        assert s["preemptions"] == 0
    assert 0 < s["kv_utilization"] <= 1


def test_preemption_happens_when_blocks_run_out_and_everything_still_finishes():
    r = run(gpu="l4", model="llama-3.1-8b", policy="vllm", mem_util=0.75, max_model_len=2048,
            wl=dict(n_requests=300, rate=100, prompt_mean=200, output_mean=900, length_dist="fixed"))
    assert r.summary["preemptions"] > 0
    assert (r.requests["generated_tokens"] == 900).all()
    assert r.requests["preemptions"].sum() == r.summary["preemptions"]


@pytest.mark.parametrize("system", [0, 16])
def test_a_preempted_request_takes_back_its_blocks_still_cached(system):
    # vLLM caches every full block it computes, so a recompute after preemption skips the leading
    # blocks no allocation has reached since: what preemption wastes (prefill beyond each prompt
    # once) shrinks by far more than a one-block system prompt could explain, and never goes below
    # nothing. Without a shared prompt the engine keeps no cache tables and follows the free queue
    # by counts; with one, its tables hold the preempted request's blocks: both keep these books.
    n, prompt = 60, 2000
    def waste(caching):
        r = run(gpu="l4", model="llama-3.1-8b", policy="sarathi", mem_util=0.75, max_model_len=4096,
                prefix_caching=caching, trace_cap=1 << 16,
                wl=dict(n_requests=n, rate=1000, prompt_mean=prompt, output_mean=600, length_dist="fixed",
                        prefix_groups=1 if system else 0, prefix_tokens=system))
        assert r.summary["preemptions"] > 0 and r.trace["stride"] == 1
        assert (r.requests["generated_tokens"] == 600).all()
        assert r.kv_tables["PI"][0, P_USED] == 0  # every block back in the pool
        once = n * prompt + (system if caching else n * system)
        return r.trace["prefill_tokens"].sum() - once, r.summary["makespan_s"]
    kept, kept_s = waste(True)
    recomputed, recomputed_s = waste(False)
    assert 0 <= kept < 0.7 * recomputed
    assert kept_s < recomputed_s


def test_same_seed_same_results_and_another_seed_differs():
    kw = dict(gpu="h100", model="llama-3.1-8b", wl=dict(n_requests=400, rate=8, length_dist="sharegpt", seed=3))
    a, b = run(**kw), run(**kw)
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k])
    c = run(gpu="h100", model="llama-3.1-8b", wl=dict(n_requests=400, rate=8, length_dist="sharegpt", seed=4))
    assert not np.array_equal(a.requests["finish_s"], c.requests["finish_s"])


def test_serial_matches_the_md1_mean_wait():
    # one request at a time, fixed lengths: a deterministic service time D; Poisson arrivals at
    # utilisation 0.5 must wait rho*D / (2(1-rho)) = D/2 on average (Pollaczek-Khinchine); the
    # server's own times, without what a client adds (API server, async scheduling's extra step)
    server = dict(api_server=False, async_scheduling=False)
    alone = run(gpu="h100", model="llama-3.1-8b", policy="serial", **server,
                wl=dict(n_requests=1, rate=1, prompt_mean=256, output_mean=64))
    D = alone.requests["finish_s"][0] - alone.requests["scheduled_s"][0]
    rho = 0.5
    r = run(gpu="h100", model="llama-3.1-8b", policy="serial", **server,
            wl=dict(n_requests=50_000, rate=rho / D, prompt_mean=256, output_mean=64, seed=1))
    q = r.requests
    service = q["finish_s"] - q["scheduled_s"]
    np.testing.assert_allclose(service, D, rtol=1e-9)
    wait = (q["scheduled_s"] - q["arrival_s"]).mean()
    assert wait == pytest.approx(rho * D / (2 * (1 - rho)), rel=0.05)


@pytest.mark.parametrize("policy", POLICIES)
def test_littles_law(policy):
    # the engine's own queue counters, integrated over time, against lambda x W from request times
    r = run(gpu="h100", model="llama-3.1-8b", policy=policy,
            wl=dict(n_requests=3000, rate=6 if policy != "serial" else 0.5, length_dist="sharegpt", seed=2))
    s = r.summary
    assert s["mean_in_system"] == pytest.approx(s["completed_req_s"] * s["e2e_s"]["mean"], rel=0.05)


def test_paged_kv_keeps_utilisation_high_where_reservation_wastes_it():
    # vLLM paper, Fig. 2: only 20.4%-38.2% of reserved KV holds tokens in Orca; vLLM 96.3%
    wl = dict(n_requests=3000, rate=30, length_dist="sharegpt", seed=5)
    paged = run(gpu="a100-40gb", model="llama-2-13b", policy="vllm", wl=wl)
    reserved = run(gpu="a100-40gb", model="llama-2-13b", policy="orca", wl=wl)
    assert paged.summary["kv_utilization"] >= 0.90
    assert reserved.summary["kv_utilization"] < 0.40


def test_sustainable_rate_orders_the_policies_at_saturation():
    # every request arrives at once: throughput is the sustainable rate
    wl = dict(n_requests=600, rate=10_000, length_dist="sharegpt", seed=7)
    tput = {p: run(gpu="a100-40gb", model="llama-2-13b", policy=p, wl=wl).summary["throughput_req_s"]
            for p in ("serial", "static", "orca", "vllm")}
    assert tput["vllm"] > tput["orca"] > tput["static"] > tput["serial"]
    assert tput["vllm"] > 1.5 * tput["orca"]  # paging packs more sequences per step


def test_chunked_prefill_lowers_p99_inter_token_latency_among_long_prompts():
    # chat decodes, with a long document prompt among every ten requests
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rng = np.random.default_rng(0)
    t = 0.0
    for i in range(1500):
        t += rng.exponential(1 / 12)
        rows.append(f"{t:.4f},200,300" if i % 10 else f"{t:.4f},7000,20")
    trace = "\n".join(rows)
    kw = dict(gpu="h100", model="llama-3.1-8b", max_model_len=8192, trace_csv=trace)
    whole = simulate(SimConfig(policy="vllm", **kw)).summary
    chunked = simulate(SimConfig(policy="sarathi", chunk=512, max_batched_tokens=1024, **kw)).summary
    assert chunked["itl_ms"]["p99"] < 0.5 * whole["itl_ms"]["p99"]


def test_static_batching_holds_finished_members_until_the_batch_ends():
    # two requests together: the short one's slot stays taken until the long one finishes, so a
    # third request cannot start before then
    trace = "arrival_s,prompt_tokens,output_tokens\n0,100,5\n0,100,200\n0.001,100,5\n"
    r = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="static", max_seqs=2, trace_csv=trace))
    q = r.requests
    assert q["finish_s"][0] < q["finish_s"][1]
    assert q["scheduled_s"][2] >= q["finish_s"][1]
    orca = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="orca", max_seqs=2, trace_csv=trace))
    assert orca.requests["scheduled_s"][2] < q["finish_s"][1]


def test_overload_is_reported():
    light = run(gpu="h100", model="llama-3.1-8b", wl=dict(n_requests=2000, rate=2))
    heavy = run(gpu="h100", model="llama-3.1-8b", policy="serial", wl=dict(n_requests=2000, rate=20))
    assert light.summary["stable"] and not heavy.summary["stable"]


def test_goodput_counts_requests_within_both_targets():
    r = run(gpu="h100", model="llama-3.1-8b", ttft_slo_ms=50, tpot_slo_ms=9.5,
            wl=dict(n_requests=1000, rate=8, length_dist="sharegpt"))
    s, q = r.summary, r.requests
    ttft = (q["first_token_s"] - q["arrival_s"]) * 1e3
    tpot = np.where(q["output_tokens"] > 1, (q["finish_s"] - q["first_token_s"]) / np.maximum(q["output_tokens"] - 1, 1) * 1e3, 0)
    ok = (ttft <= 50) & (tpot <= 9.5)
    assert s["slo_attainment"] == pytest.approx(ok.mean())
    # rates are over the steady state: the second half of the arrival window
    a = np.sort(q["arrival_s"])
    t0, t1 = a[len(a) // 2], a[-1]
    done = (q["finish_s"] > t0) & (q["finish_s"] <= t1)
    assert s["goodput_req_s"] == pytest.approx((ok & done).sum() / (t1 - t0))
    assert 0 < s["goodput_req_s"] <= s["throughput_req_s"]


def test_step_trace_is_bounded():
    r = run(gpu="h100", model="llama-3.1-8b", trace_cap=64, wl=dict(n_requests=2000, rate=5))
    assert len(r.trace["time_s"]) <= 64 and r.trace["stride"] > 1
    assert np.all(np.diff(r.trace["time_s"]) >= 0)


def test_streaming_sample_records_every_token():
    r = run(gpu="h100", model="llama-3.1-8b", wl=dict(n_requests=50, rate=2, prompt_mean=100, output_mean=40))
    times = r.stream["token_s"]
    for row, req in zip(times, r.stream["request"]):
        got = row[~np.isnan(row)]
        assert len(got) == 40
        assert got[0] == pytest.approx(r.requests["first_token_s"][req])
        assert got[-1] == pytest.approx(r.requests["finish_s"][req])
        assert np.all(np.diff(got) > 0)


@pytest.mark.parametrize("kw,match", [
    (dict(policy="fifo"), "policy"), (dict(router="random"), "router"), (dict(max_seqs=0), "max batch must be a whole number from 1"),
    (dict(gpus=3, tp=2), "multiple of tp"), (dict(max_model_len=300_000), "context"),
    (dict(ttft_slo_ms=0), "time-to-first-token target must be a number from"), (dict(model="llama-3.1-70b", gpus=1), "tp=2"),
])
def test_bad_configurations_raise_value_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        run(gpu=kw.pop("gpu", "h100"), **{"model": "llama-3.1-8b", **kw}, wl=dict(n_requests=5))


def test_prompt_longer_than_the_context_is_refused():
    with pytest.raises(ValueError, match="exceeds the maximum model length"):
        run(gpu="h100", model="llama-2-7b", wl=dict(n_requests=5, prompt_mean=5000, output_mean=10))


@st.composite
def cluster_scenarios(draw):
    disagg = draw(st.booleans())
    gpus = draw(st.integers(2, 4))
    wl = WorkloadSpec(n_requests=draw(st.integers(1, 200)), rate=draw(st.floats(1, 300)),
                      prompt_mean=draw(st.floats(1, 700)), output_mean=draw(st.floats(1, 300)),
                      length_dist=draw(st.sampled_from(["fixed", "exponential", "lognormal"])),
                      seed=draw(st.integers(0, 10_000)))
    return dict(gpu="l4", model="llama-3.1-8b", gpus=gpus, policy=draw(st.sampled_from(["orca", "vllm", "sarathi"])),
                mem_util=draw(st.floats(0.8, 0.92)), router=draw(st.sampled_from(["rr", "lor", "kv"])),
                disagg=disagg, prefill_gpus=draw(st.integers(1, gpus - 1)) if disagg else 0, workload=wl,
                max_seqs=draw(st.integers(1, 64)), max_batched_tokens=draw(st.integers(64, 4096)), max_model_len=1024)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster_scenarios())
def test_invariants_across_replicas_and_disaggregated_pools(kw):
    if kw["policy"] == "sarathi":
        kw["max_batched_tokens"] = max(kw["max_batched_tokens"], kw["max_seqs"])
    r = run(**kw)
    q, s = r.requests, r.summary
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    assert (q["arrival_s"] <= q["scheduled_s"]).all() and (q["first_token_s"] <= q["finish_s"]).all()
    assert 0 <= s["peak_kv_blocks_used"] <= s["kv_blocks_total"] and s["min_free_kv_blocks"] >= 0
    if kw["disagg"]:
        moved = q["xfer_done_s"] >= 0
        assert (moved == (q["output_tokens"] > 1)).all()  # every request with more to say moved its KV


def assert_same_run(a, b):
    for k in a.requests:
        np.testing.assert_array_equal(a.requests[k], b.requests[k], err_msg=k)
    for k in a.trace:
        np.testing.assert_array_equal(a.trace[k], b.trace[k], err_msg=k)
    np.testing.assert_array_equal(a.stream["token_s"], b.stream["token_s"])
    np.testing.assert_array_equal(a.itl_hist, b.itl_hist)
    wall = {"sim_wall_s", "quiet_steps"}
    assert {k: v for k, v in a.summary.items() if k not in wall} == {k: v for k, v in b.summary.items() if k not in wall}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios(), cluster_scenarios()), st.booleans(), st.booleans(), st.sampled_from(["paged", "sdpa"]),
       st.sampled_from(["graph", "eager", "auto"]))
def test_fast_forward_over_quiet_decode_steps_changes_no_result(kw, autoscale, few_streams, kernel, launch):
    # runs of decode steps between events are taken back to back outside the general loop: every
    # request time, trace row, histogram count and summary figure must come out the same
    if kw["policy"] == "sarathi":
        kw["max_batched_tokens"] = max(kw["max_batched_tokens"], kw["max_seqs"])
    kw.update(stream_samples=1 if few_streams else 12, trace_cap=64, attn_kernel=kernel, launch=launch)
    if autoscale and kw.get("gpus", 1) > 1 and not kw.get("disagg"):
        kw.update(autoscale=True, scale_target=4.0, scale_interval_s=0.5, startup_fixed_s=1.0)
    assert_same_run(run(**kw), run(**kw, fast_forward=False))


@pytest.mark.parametrize("policy", POLICIES)
def test_fast_forward_takes_most_steps_of_a_light_load_and_changes_no_result(policy):
    kw = dict(gpu="h100", model="llama-3.1-8b", policy=policy,
              wl=dict(n_requests=1000, rate=0.5 if policy == "serial" else 4, length_dist="lognormal", seed=2))
    fast = run(**kw)
    assert fast.summary["quiet_steps"] > 0.5 * fast.summary["steps"]
    assert_same_run(fast, run(**kw, fast_forward=False))


def test_disaggregated_decode_pool_under_preemption_does_not_deadlock():
    # landed KV transfers hold decode-pool blocks: they must not queue behind recomputing prompts
    from core.lab.inputs import LabInputs, stage_config
    for seed in range(3):
        inp = LabInputs(model="llama-3.1-70b", gpus=8, rate=20, prompt_tokens=4000, tensor_parallel=True,
                        requests=300, seed=seed)
        s = simulate(stage_config(inp, 5, split=(4, 2, 2))).summary
        assert s["requests"] == 300 and s["preemptions"] > 0


def test_a_run_beyond_the_step_guard_stops_with_a_clear_error():
    with pytest.raises(ValueError, match="engine steps"):
        run(gpu="h100", model="llama-3.1-8b", policy="serial", max_steps=1000,
            wl=dict(n_requests=100, rate=100, prompt_mean=100, output_mean=100))


def test_chunked_prefill_chunks_at_the_token_budget_by_default():
    # vLLM V1 and Sarathi-Serve: the prefill chunk is the step's token budget, so a prompt that fits
    # the budget is prefilled in one step (a 512-token chunk inside an 8,192 budget took 12 steps)
    from core.physics import catalog, costmodel
    spec = WorkloadSpec(n_requests=1, rate=1.0, prompt_mean=6000, output_mean=2, length_dist="fixed")
    one = simulate(SimConfig(policy="sarathi", max_batched_tokens=8192, workload=spec)).summary
    step = costmodel.steptime(catalog.get_gpu("h100"), catalog.get_model("llama-3.1-8b"), 1, prefill_tokens=6000,
                              launch="graph", attn_kernel="paged", engine="vllm")["step_ms"]
    assert one["ttft_ms"]["p50"] == pytest.approx(step, rel=0.25)
    small = simulate(SimConfig(policy="sarathi", max_batched_tokens=8192, chunk=512, workload=spec)).summary
    assert one["steps"] == 2  # the prompt's one step, then the second output token's
    assert small["steps"] == 12 + 1  # ceil(6000 / 512) chunks, then the second output token


def test_no_default_path_chunks_below_its_token_budget():
    # A budget of 8,192 with 512-token chunks admitted many partial prompts at once and preempted
    # 800-1,800 times; vLLM V1 and Sarathi-Serve chunk at the budget. Every way a run is built
    # (the Lab, its stages, the Planner's schedules, Compare, the command line) keeps them equal.
    from dataclasses import replace

    from core.cli.main import build_parser
    from core.cli.simulate import config_from_args
    from core.lab import compare
    from core.lab.inputs import LabInputs, current_config, stage_config
    from core.planner.space import SCHEDULES, Deployment, to_config
    from core.lab.recommend import planner_workload

    def chunk(cfg):
        return cfg.chunk or cfg.max_batched_tokens

    lab = LabInputs(gpus=4)
    built = [current_config(lab), current_config(replace(lab, max_batched_tokens=8192))]
    built += [stage_config(lab, k) for k in (1, 2, 3, 4, 5)]
    built += [to_config(Deployment("h100", 1, 1, "bf16", policy, budget), planner_workload(lab))
              for policy, budget in SCHEDULES]
    built.append(compare.config(compare.from_lab(lab), lab))
    built.append(config_from_args(build_parser().parse_args(["simulate", "--model", "llama-3.1-8b", "--policy", "sarathi"])))
    for cfg in built:
        assert chunk(cfg) == cfg.max_batched_tokens, cfg
    assert current_config(LabInputs()).max_batched_tokens == 2048  # vLLM V1's online default, as the README says
