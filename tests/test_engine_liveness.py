"""The engine never stops with requests unserved: every in-range configuration serves every
request, or is refused up front with a ValueError saying what to change."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


@st.composite
def small_clusters(draw):
    gpus = draw(st.integers(1, 4))
    disagg = gpus > 1 and draw(st.booleans())
    policy = draw(st.sampled_from(["serial", "static", "orca", "vllm", "sarathi"]))
    max_seqs = draw(st.sampled_from([1, 1, 2, 3, 4, 8, 64]))  # one sequence slot is the edge that deadlocked
    wl = WorkloadSpec(n_requests=draw(st.integers(1, 120)), rate=draw(st.floats(0.5, 400)),
                      prompt_mean=draw(st.floats(1, 900)), output_mean=draw(st.floats(1, 500)),
                      length_dist=draw(st.sampled_from(["fixed", "exponential", "lognormal", "sharegpt"])),
                      seed=draw(st.integers(0, 10_000)))
    autoscale = not disagg and gpus > 1 and draw(st.booleans())
    return SimConfig(gpu="l4", model="llama-3.1-8b", gpus=gpus, policy=policy, workload=wl,
                     mem_util=draw(st.floats(0.7, 0.92)),  # a tight KV pool: blocks run out, preemption happens
                     router=draw(st.sampled_from(["rr", "lor", "kv"])), disagg=disagg,
                     prefill_gpus=draw(st.integers(1, gpus - 1)) if disagg else 0, max_seqs=max_seqs,
                     max_batched_tokens=draw(st.integers(1, 4096)), chunk=draw(st.one_of(st.none(), st.integers(1, 1024))),
                     block_size=draw(st.sampled_from([1, 16, 64, 256])), max_model_len=draw(st.sampled_from([None, 1024, 4096])),
                     autoscale=autoscale, scale_target=draw(st.floats(0.5, 64)), scale_interval_s=0.5,
                     startup_fixed_s=1.0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters())
def test_every_request_is_served_or_the_configuration_is_refused(cfg):
    try:
        r = simulate(cfg)
    except ValueError as e:  # refused up front, saying what to change
        assert str(e)
        return
    q = r.requests
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    assert (q["finish_s"] >= q["arrival_s"]).all()


def test_one_sequence_slot_on_a_split_prefill_decode_deployment_serves_every_request():
    # Llama-3.1-70B on 4 GPUs split into a prefill and a decode pool, one sequence per step, without
    # chunked prefill: the decode replica preempted its one running request with every block held
    # and then sat idle with requests queued ("engine deadlock")
    from core.lab.inputs import LabInputs, stage_config
    inp = LabInputs(model="llama-3.1-70b", gpus=4, tensor_parallel=True, max_seqs=1, length_dist="sharegpt",
                    chunked_prefill=False, requests=500)
    s = simulate(stage_config(inp, 5)).summary
    assert s["requests"] == 500 and s["preemptions"] > 0
