"""KV offload to host memory and prefix-aware routing (core/engine/kvcache.py offload, loop.py
load_from_host and route_prefix, core/serving/offload.py): what a tier keeps, what a load costs, and
where a prefix router sends a conversation's next turn."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

BS = 16


def chat(n=1500, users=0, rate=20.0, turns=4, system=0, seed=1, **kw):
    """Multi-turn chat: each turn's prompt holds the conversation so far (an open loop at `rate`, or
    a closed loop of `users` who think 5 s between turns)."""
    spec = WorkloadSpec(n_requests=n, rate=rate if not users else math.inf, prompt_mean=300, output_mean=200,
                        turns=turns, turn_gap_s=20.0, prefix_groups=4 if system else 0, prefix_tokens=system,
                        concurrency=users, think_s=5.0 if users else 0.0, seed=seed)
    kw.setdefault("gpu", "l40s")
    kw.setdefault("model", "llama-3.1-8b")
    return simulate(SimConfig(workload=spec, **kw))


def same_run(a, b) -> bool:
    return all(np.array_equal(a.requests[c], b.requests[c], equal_nan=True) for c in a.requests)


def test_a_tier_too_small_for_one_block_is_no_tier():
    plain = chat(n=600)
    for gb in (0.0, 1e-9):
        tiny = chat(n=600, kv_offload_gb=gb)
        assert same_run(plain, tiny)
    assert chat(n=600, kv_offload_gb=1e-9).summary["kv_offload"]["blocks_stored"] == 0


def test_a_larger_tier_adds_its_own_memory_not_a_multiple_of_the_gpu_tables():
    # the tier's ring and table are the simulator's bookkeeping in 8-byte words: growing the tier
    # from 16 to 256 GiB grows the replica's tables by those words (fewer than 14 a block: a ring of
    # two to four places a block, room for ghosts, a table of two words a ring place at most, and
    # room to grow it), not by widening every row of the GPU's tables to the ring's size
    runs = [chat(n=300, kv_offload_gb=gb) for gb in (16, 256)]
    small, large = (r.kv_tables["KC"] for r in runs)
    blocks = [r.summary["kv_offload"]["blocks_per_replica"] for r in runs]
    assert large.shape[2] == small.shape[2]  # the GPU tables' rows are as wide as before
    assert large.nbytes - small.nbytes <= 8 * 14 * (blocks[1] - blocks[0]) * large.shape[0]


def expected_cached(res) -> np.ndarray:
    """Prompt tokens a conversation's turn finds cached when nothing it computed was lost: the full
    blocks of the earlier turns (their prompts and answers; an answer's last token is sampled, never
    computed), up to the partial last block of its own prompt (the last token is always computed)."""
    conv = res.workload.conversation_id
    prompt, output = res.requests["prompt_tokens"], res.requests["output_tokens"]
    first = res.requests["scheduled_s"]
    out = np.zeros(len(prompt), np.int64)
    for c in np.unique(conv[conv >= 0]):
        turns = np.flatnonzero(conv == c)
        turns = turns[np.argsort(first[turns])]
        for prev, q in zip(turns, turns[1:]):
            out[q] = min((prompt[q] - 1) // BS, (prompt[prev] + output[prev] - 1) // BS) * BS
    return out


def test_with_a_tier_that_holds_the_working_set_no_prompt_is_computed_twice():
    # 96 users, eight turns each, on one L40S: the GPU's cache cannot hold every conversation
    # between its turns, so without a tier later turns recompute what the GPU evicted
    gpu_only = chat(n=768, users=96, turns=8)
    tiered = chat(n=768, users=96, turns=8, kv_offload_gb=256)
    want = expected_cached(tiered)
    assert gpu_only.summary["prefix_cache_evictions"] > 0
    assert (gpu_only.requests["cached_tokens"] < expected_cached(gpu_only)).sum() > 50
    assert np.array_equal(tiered.requests["cached_tokens"], want)
    off = tiered.summary["kv_offload"]
    assert off["blocks_loaded"] > 0 and off["blocks_dropped"] == 0
    assert off["hit_tokens_host"] + off["hit_tokens_gpu"] == tiered.summary["prefill_tokens_saved"]
    assert tiered.summary["ttft_ms"]["mean"] < gpu_only.summary["ttft_ms"]["mean"]


def test_a_load_over_a_slower_link_takes_longer_and_every_bit_of_it_is_in_ttft():
    fast = chat(n=800, kv_offload_gb=128)
    slow = chat(n=800, kv_offload_gb=128, kv_offload_gbps=2.0)
    assert fast.summary["kv_offload"]["blocks_loaded"] > 0
    loaded = np.isfinite(slow.requests["xfer_done_s"]) & (slow.requests["xfer_done_s"] > 0)
    assert loaded.any()
    # the wire time of each load: its tokens' KV over the link (one L40S: its 2 GB/s)
    wire = slow.requests["xfer_done_s"][loaded] - slow.requests["xfer_start_s"][loaded]
    assert (wire > 0).all()
    # a request waits for its load before its first token; one preempted after its first token reloads
    # its blocks when it is readmitted, after that token (the times kept are its last load's)
    r = slow.requests
    first_run = loaded & (r["preemptions"] == 0)
    assert first_run.any() and (r["first_token_s"][first_run] >= r["xfer_done_s"][first_run]).all()
    again = loaded & (r["preemptions"] > 0)
    assert (r["xfer_start_s"][again] >= r["scheduled_s"][again]).all()
    assert slow.summary["ttft_ms"]["mean"] > fast.summary["ttft_ms"]["mean"]


@pytest.mark.parametrize("seed, system", [(1, 0), (2, 1024), (3, 512)])
def test_prefix_routing_never_finds_fewer_prompt_tokens_cached_than_round_robin(seed, system):
    prefix = chat(n=1200, rate=30.0, system=system, seed=seed, gpus=4, router="prefix")
    blind = {r: chat(n=1200, rate=30.0, system=system, seed=seed, gpus=4, router=r) for r in ("rr", "lor", "kv")}
    for name, other in blind.items():
        assert prefix.summary["prefix_hit_rate"] >= other.summary["prefix_hit_rate"], name
    # a conversation's later turns follow it to the replica that holds it far more often than a
    # router that weighs load alone sends them there
    assert stays(prefix) > stays(blind["lor"]) + 0.2, (stays(prefix), stays(blind["lor"]))


def stays(res) -> float:
    """The share of later turns that go to the replica their conversation's previous turn went to."""
    conv, replica = res.workload.conversation_id, res.requests["replica"]
    order = np.lexsort((res.requests["arrival_s"], conv))
    later = (conv[order][1:] == conv[order][:-1]) & (conv[order][1:] >= 0)
    return float((replica[order][1:] == replica[order][:-1])[later].mean())


def test_prefix_routing_still_spreads_the_load():
    # the load scorers keep every replica at work even when one holds every system prompt
    res = chat(n=1200, rate=30.0, system=1024, turns=1, gpus=4, router="prefix")
    counts = np.bincount(res.requests["replica"], minlength=4)
    assert counts.min() > 0.1 * counts.sum(), counts


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(users=st.integers(8, 64), turns=st.integers(2, 6), gb=st.sampled_from([0.05, 0.5, 4.0]),
       system=st.sampled_from([0, 256]), seed=st.integers(0, 10_000))
def test_blocks_are_conserved_across_the_gpu_and_host_tiers(users, turns, gb, system, seed):
    res = chat(n=users * turns, users=users, turns=turns, system=system, seed=seed, kv_offload_gb=gb,
               gpu="l4", model="llama-3.1-8b")
    b = res.kv_books()
    assert b["used"] + b["free"] + b["cached"] == b["pool"], b
    assert b["counted"] == dict(free=b["free"], cached=b["cached"], entries=b["entries"], host=b["host"]), b
    assert b["host"] <= b["host_capacity"]
    off = res.summary["kv_offload"]
    # every block stored to the tier was loaded back, dropped for room, or is there still
    assert off["blocks_stored"] == off["blocks_loaded"] + off["blocks_dropped"] + b["host"], (off, b)
    assert (res.requests["finish_s"] > 0).all()  # every turn of every user was served


@pytest.mark.parametrize("kw, words", [
    (dict(kv_offload_gb=-1.0), "KV offload tier"),
    (dict(kv_offload_gb=float("nan")), "KV offload tier"),
    (dict(kv_offload_gb=8.0, kv_offload_gbps=0.0), "host link"),
    (dict(kv_offload_gb=8.0, kv_offload_gbps=float("inf")), "host link"),
    (dict(kv_offload_gb=8.0, prefix_caching=False), "turn prefix caching on"),
    (dict(router="prefix", prefix_caching=False), "turn prefix caching on"),
    (dict(router="prefix", policy="orca"), "turn prefix caching on"),
])
def test_bad_offload_and_routing_inputs_are_refused_in_one_sentence(kw, words):
    with pytest.raises(ValueError, match=words) as e:
        chat(n=50, **kw)
    assert "\n" not in str(e.value)


def test_the_trade_off_card_runs_a_chat_where_the_sidebar_shares_nothing_and_shows_the_gain():
    from core.lab import tradeoffs
    from core.lab.inputs import LabInputs
    r = tradeoffs.ab(LabInputs(gpu="l40s", gpus=2, rate=8.0, prompt_tokens=256, output_tokens=256), "prefix_reuse")
    assert r.error is None
    assert r.on.config.router == "prefix" and r.on.config.kv_offload_gb > 0 and r.off.config.kv_offload_gb == 0
    assert r.on.config.workload.turns == tradeoffs.REUSE_TURNS and "share nothing" in r.note
    a, b = r.off.summary, r.on.summary
    assert b["prefix_hit_rate"] > a["prefix_hit_rate"] and b["ttft_ms"]["p50"] < a["ttft_ms"]["p50"]
    table = tradeoffs.comparison(r)
    assert "found in host memory" in table["metric"] and table["off"][table["metric"].index("found in host memory")] == "no tier"
    assert "Prompt tokens found cached" in tradeoffs.verdict(r)
