"""Prefix caching as vLLM V1 runs it (core/engine/kvcache.py): full blocks found by their prefix,
a hit skips that prefill, cached blocks no request holds are evicted least recently used."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec, generate, load_trace

BS = 16


def run(spec, **kw):
    kw.setdefault("gpu", "h100")
    kw.setdefault("model", "llama-3.1-8b")
    kw.setdefault("policy", "sarathi")
    return simulate(SimConfig(workload=spec, **kw))


def trace(rows, header="arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens"):
    return "\n".join([header] + [",".join(str(v) for v in r) for r in rows])


def balanced(res, replica=0):
    """Every block of the pool is held by a request, free, or cached, and the counters the engine
    keeps agree with its queue and hash table walked one by one."""
    b = res.kv_books(replica)
    assert b["used"] + b["free"] + b["cached"] == b["pool"], b
    assert b["counted"] == dict(free=b["free"], cached=b["cached"], entries=b["entries"], host=b["host"]), b
    return b


@pytest.mark.parametrize("policy", ["sarathi", "vllm"])
def test_every_request_after_the_first_hits_the_shared_prefix_up_to_its_partial_last_block(policy):
    # 1,000-token system prompt: 62 full blocks (992 tokens); the 8 tokens after them are not a full block
    spec = WorkloadSpec(n_requests=60, rate=8, prompt_mean=200, output_mean=32, prefix_groups=1, prefix_tokens=1000)
    res = run(spec, policy=policy)
    cached = res.requests["cached_tokens"]
    assert cached[0] == 0
    assert (cached[1:] == 992).all()
    assert res.summary["prefill_tokens_saved"] == 59 * 992
    assert res.summary["prefix_hit_rate"] == pytest.approx(59 * 992 / (60 * 1200))
    assert res.kv_books()["used"] == 0
    # a block every request holds is stored once: the cache never holds more tokens than its slots
    assert 0 < res.summary["kv_utilization"] <= 1
    assert (res.trace["kv_slots_empty"] >= 0).all()
    from core.serving.export import requests_csv
    rows = [line for line in requests_csv(res).splitlines() if not line.startswith("#")]
    col = rows[0].split(",").index("cached_prompt_tokens")
    assert [int(r.split(",")[col]) for r in rows[1:4]] == [0, 992, 992]


def test_a_prompt_wholly_cached_still_computes_its_last_token():
    # the whole 1,024-token prompt is the shared prefix: vLLM recomputes the last token to sample
    # from it, so the last full block (tokens 1,008..1,023) is computed again
    rows = [(0.05 * i, 1024, 16, 7, 1024) for i in range(20)]
    res = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", trace_csv=trace(rows)))
    assert list(res.requests["cached_tokens"]) == [0] + [1008] * 19


def test_ttft_falls_as_the_shared_share_of_the_prompt_grows():
    p50 = []
    for share in (0.0, 0.25, 0.5, 0.75, 0.95):
        shared = int(2048 * share)
        spec = WorkloadSpec(n_requests=400, rate=12, prompt_mean=2048 - shared, output_mean=64,
                            prefix_groups=1 if shared else 0, prefix_tokens=shared, seed=3)
        p50.append(run(spec, model="llama-3.1-70b", gpu="h100", tp=4, gpus=4).summary["ttft_ms"]["p50"])
    assert all(b < a for a, b in zip(p50, p50[1:])), p50
    assert p50[-1] < 0.5 * p50[0], p50


def test_prefix_caching_off_recomputes_every_prompt_and_changes_nothing_without_sharing():
    shared = WorkloadSpec(n_requests=300, rate=10, prompt_mean=256, output_mean=64, prefix_groups=2, prefix_tokens=1500)
    on, off = run(shared), run(shared, prefix_caching=False)
    assert off.summary["prefill_tokens_saved"] == 0 and on.summary["prefill_tokens_saved"] > 0
    assert on.summary["ttft_ms"]["mean"] < off.summary["ttft_ms"]["mean"]
    plain = WorkloadSpec(n_requests=300, rate=10, prompt_mean=512, output_mean=64, length_dist="lognormal")
    a, b = run(plain), run(plain, prefix_caching=False)
    assert np.array_equal(a.requests["first_token_s"], b.requests["first_token_s"])
    assert np.array_equal(a.requests["finish_s"], b.requests["finish_s"])


def test_a_later_turn_finds_the_earlier_turns_prompt_and_answer_cached():
    # two turns 60 s apart (the first has long finished): turn 2's prompt is turn 1's prompt (300),
    # its answer (100) and a new message (300); turn 1 computed 300 + 99 tokens (the last sampled
    # token's KV is never computed): 24 full blocks
    spec = WorkloadSpec(n_requests=20, rate=0.5, prompt_mean=300, output_mean=100, turns=2, turn_gap_s=60)
    wl = generate(spec)
    res = run(spec)
    second = wl.prompt_tokens == 700
    assert second.sum() == 10 and (wl.prompt_tokens[~second] == 300).all()
    assert (res.requests["cached_tokens"][second] == (300 + 99) // BS * BS).all()
    assert (res.requests["cached_tokens"][~second] == 0).all()


def test_under_memory_pressure_hits_fall_cached_blocks_are_evicted_and_no_block_leaks():
    # 300 distinct 1,024-token system prompts cycle; a small KV cache cannot keep them all
    rows = [(0.02 * i, 1100, 32, i % 300, 1024) for i in range(1500)]
    roomy = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", trace_csv=trace(rows)))
    tight = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", trace_csv=trace(rows), mem_util=0.3))
    assert tight.summary["kv_blocks_total"] < 300 * 64 < roomy.summary["kv_blocks_total"]
    assert roomy.summary["prefix_cache_evictions"] == 0
    assert tight.summary["prefix_cache_evictions"] > 0
    assert tight.summary["prefix_hit_rate"] < 0.5 * roomy.summary["prefix_hit_rate"]
    for res in (roomy, tight):
        assert balanced(res)["used"] == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.integers(0, 12), shared=st.integers(1, 2000), turns=st.integers(1, 4),
       prompt=st.integers(1, 800), output=st.integers(1, 300), rate=st.floats(1, 60), mem_util=st.sampled_from([0.3, 0.9]),
       policy=st.sampled_from(["sarathi", "vllm"]), replicas=st.integers(1, 3), pp=st.sampled_from([1, 1, 2]),
       chunk=st.sampled_from([None, 256]), seed=st.integers(0, 99))
def test_no_block_leaks_and_no_hit_beyond_the_prompt(groups, shared, turns, prompt, output, rate, mem_util, policy,
                                                      replicas, pp, chunk, seed):
    spec = WorkloadSpec(n_requests=120, rate=rate, prompt_mean=prompt, output_mean=output, length_dist="uniform",
                        prefix_groups=groups, prefix_tokens=shared if groups else 0, turns=turns, turn_gap_s=2.0,
                        seed=seed)
    try:
        res = run(spec, policy=policy, gpus=replicas * pp, pp=pp, mem_util=mem_util, chunk=chunk)
    except ValueError:  # a shape that does not fit (the message says what to change)
        return
    req = res.requests
    assert (req["finish_s"] >= 0).all()
    assert ((req["cached_tokens"] <= req["prompt_tokens"] - 1) & (req["cached_tokens"] % BS == 0)).all()
    if groups == 0 and turns == 1:
        assert res.summary["prefill_tokens_saved"] == 0
        return
    for r in range(res.summary["replicas"]):
        assert balanced(res, r * pp)["used"] == 0  # a pipeline's batches in flight share one pool


def test_trace_ids_are_read_and_bad_ones_named():
    wl = load_trace("arrival_s,prompt_tokens,output_tokens,conversation_id\n0,10,5,3\n1,30,5,3\n2,10,5,\n")
    assert list(wl.conversation_id) == [3, 3, -1] and wl.prefix_id is None
    with pytest.raises(ValueError, match="prefix_id and prefix_tokens"):
        load_trace("arrival_s,prompt_tokens,output_tokens,prefix_id\n0,10,5,1\n")
    with pytest.raises(ValueError, match="line 2: prefix_tokens 50 must be within 0..10"):
        load_trace("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,5,1,50\n")
    with pytest.raises(ValueError, match="optionally followed by"):
        load_trace("arrival_s,prompt_tokens,output_tokens,session\n0,10,5,1\n")


def test_shared_prompts_and_turns_are_checked():
    with pytest.raises(ValueError, match="system prompts need a length"):
        generate(WorkloadSpec(prefix_groups=3, prefix_tokens=0))
    with pytest.raises(ValueError, match="turns per conversation"):
        generate(WorkloadSpec(turns=0))
    with pytest.raises(ValueError, match="exceeds the maximum model length"):
        generate(WorkloadSpec(prompt_mean=500, output_mean=100, turns=8, max_total_tokens=4096))


def test_quiet_steps_run_back_to_back_give_the_same_results_with_prefix_caching():
    spec = WorkloadSpec(n_requests=300, rate=6, prompt_mean=300, output_mean=200, length_dist="exponential",
                        prefix_groups=3, prefix_tokens=700, turns=3, turn_gap_s=4.0, seed=5)
    fast, slow = run(spec, gpus=2, mem_util=0.3), run(spec, gpus=2, mem_util=0.3, fast_forward=False)
    assert fast.summary["quiet_steps"] > 0 and fast.summary["prefix_cache_evictions"] > 0
    for col in ("first_token_s", "finish_s", "cached_tokens"):
        assert np.array_equal(fast.requests[col], slow.requests[col])


def test_command_line_sets_shared_prompts_and_turns_and_can_turn_caching_off():
    import json
    import subprocess
    import sys
    from pathlib import Path
    base = [sys.executable, "-m", "core", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--requests", "200",
            "--prompt", "100", "--output", "20", "--system-prompts", "2", "--system-prompt-tokens", "640", "--turns", "2",
            "--turn-gap", "5", "--policy", "sarathi"]
    root = Path(__file__).resolve().parent.parent
    on = subprocess.run(base, cwd=root, capture_output=True, text=True, timeout=300)
    assert on.returncode == 0, on.stderr
    assert "of prompt tokens found cached" in on.stdout and "prefill tokens saved" in on.stdout
    off = json.loads(subprocess.run(base + ["--no-prefix-caching", "--json"], cwd=root, capture_output=True, text=True,
                                    timeout=300).stdout)
    assert off["prefill_tokens_saved"] == 0 and off["prefix_hit_rate"] == 0


def test_the_planner_credits_the_prefill_a_prefix_cache_saves_and_simulates_with_it():
    from core.planner.bounds import bound, prompt_quantile
    from core.planner.space import Deployment, Engine, Workload, to_config
    spec = WorkloadSpec(n_requests=500, rate=20, prompt_mean=128, output_mean=64, prefix_groups=4, prefix_tokens=3072)
    shape = Deployment(gpu="h100", tp=1, policy="sarathi", chunk=2048)
    on, off = Workload("llama-3.1-8b", spec), Workload("llama-3.1-8b", spec, engine=Engine(prefix_caching=False))
    # a request must prefill its own 128-token message at least, not the 3,072 its system prompt adds
    assert prompt_quantile(on, 0.99) < 1000 < prompt_quantile(off, 0.99)
    assert bound(shape, on, prompt_quantile(on, 0.99)).serving_req_s > 3 * bound(shape, off, 3200).serving_req_s
    assert to_config(shape, on).prefix_caching and not to_config(shape, off).prefix_caching


def test_the_lab_shows_hit_rate_and_prefill_saved_with_units_for_shared_system_prompts():
    from pathlib import Path
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "navigation.py"), default_timeout=300)
    at.run()
    assert not any(m.label == "Prefix cache hit rate" for m in at.metric)  # nothing shared, nothing to show
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    at.sidebar.select_slider(key="sys_prompts").set_value(5).run()
    cards = {m.label: m for m in at.metric}
    assert not at.exception
    rate = cards["Prefix cache hit rate"]
    assert rate.value.endswith("%") and float(rate.value[:-1]) > 50 and rate.delta == "of prompt tokens"
    saved = cards["Prefill tokens saved"]
    assert saved.value.endswith(" tokens") and saved.value.split()[0] != "0"
    at.sidebar.toggle(key="prefix_cache").set_value(False).run()
    cards = {m.label: m for m in at.metric}
    assert cards["Prefix cache hit rate"].value == "0.0%" and cards["Prefill tokens saved"].value == "0 tokens"


def test_tables_beyond_the_machines_memory_are_refused_naming_the_block_size_not_allocated():
    # one-token blocks of a small model on 32 GPUs: millions of blocks a replica, tens of GiB of tables
    spec = WorkloadSpec(n_requests=50, rate=2.0, prompt_mean=256, output_mean=32, prefix_groups=2,
                        prefix_tokens=512)
    with pytest.raises(ValueError, match=r"GiB of this machine's memory: raise the KV block size .* here 1\)"):
        simulate(SimConfig(gpu="h100", model="gpt-oss-20b", gpus=32, block_size=1, workload=spec))
    s = simulate(SimConfig(gpu="h100", model="gpt-oss-20b", gpus=32, block_size=16, workload=spec)).summary
    assert s["requests"] == 50 and s["prefix_hit_rate"] > 0
