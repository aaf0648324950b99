"""Rack-scale GPUs (GB200 and GB300 NVL72): one NVLink domain of 72 GPUs on hosts of 4. What crosses
an HGX node's network rides NVLink inside the rack, and what a launch command starts runs a host at a time."""
import pytest

from core.physics import catalog, costmodel, expert
from core.physics.costmodel import steptime
from core.serving.serve_command import commands, pools
from core.serving.simulate import SimConfig

B200, GB200, GB300 = catalog.get_gpu("b200"), catalog.get_gpu("gb200"), catalog.get_gpu("gb300")
R1 = catalog.get_model("deepseek-r1")


def test_nvidia_smi_names_the_rack_gpus_apart_from_the_hgx_boards():
    assert catalog.get_gpu("NVIDIA GB200").id == "gb200" and catalog.get_gpu("NVIDIA GB300").id == "gb300"
    assert catalog.get_gpu("NVIDIA B200").id == "b200"
    assert GB200.arch == GB300.arch == B200.arch  # Blackwell's kernels, the B200's carried fractions
    assert costmodel.efficiency_for(GB200) == costmodel.efficiency_for(B200)


@pytest.mark.parametrize("width", [16, 32, 64])
def test_tensor_and_expert_traffic_past_eight_gpus_stays_on_nvlink_in_a_rack(width):
    # an HGX B200 sends it through one 400 Gb/s NIC a GPU; the rack's switch trays join all 72 GPUs
    assert GB200.tp_link_gbps(width) == GB200.link_gbps_per_dir > 10 * B200.tp_link_gbps(width)
    assert expert.a2a_link(GB200, width)[1] == 0.0 < expert.a2a_link(B200, width)[1]
    # past the rack the network again
    assert GB200.tp_link_gbps(128) == GB200.internode_gbps_per_dir


def test_a_wide_expert_parallel_decode_step_spends_less_on_its_all_to_all_in_a_rack():
    one = dict(decode_batch=64 * 32, context=2000, dtype="fp8", engine="vllm", ep=32, dp_attention=True, ep_load_cv=0.0)
    hgx, rack = steptime(B200, R1, 32, **one), steptime(GB200, R1, 32, **one)
    assert rack["breakdown_ms"]["all_to_all"] < hgx["breakdown_ms"]["all_to_all"]

    def gpu_work(step):  # the step less its host's part, which a rack's Grace CPU takes longer over
        return step["step_ms"] - step["breakdown_ms"]["host_issue_wait"] - step["breakdown_ms"]["scheduler"]
    assert gpu_work(rack) < gpu_work(hgx)


def test_a_rack_replica_is_launched_a_host_of_four_gpus_at_a_time():
    cfg = dict(model="deepseek-r1", tp=16, ep=16, dp_attention=True, dtype="fp8", max_model_len=4096)
    rack, hgx = pools(SimConfig(gpu="gb200", **cfg))[0], pools(SimConfig(gpu="b200", **cfg))[0]
    assert "span 4 nodes" in rack["command"] and "--data-parallel-size-local 4 " in rack["command"]
    assert "span 2 nodes" in hgx["command"] and "--data-parallel-size-local 8 " in hgx["command"]
    # every host after the first starts its own ranks (vLLM's data-parallel deployment guide), no Ray cluster
    assert "--headless and --data-parallel-start-rank 4 / 8 / 12" in rack["command"]
    assert "--data-parallel-start-rank 8" in hgx["command"]
    assert "(one server a node)" in commands(SimConfig(gpu="gb200", **cfg))
    # a tensor-parallel replica of 8 needs two of the rack's hosts, joined by its NVLink
    lines = commands(SimConfig(gpu="gb200", model="llama-3.1-70b", tp=8, dtype="fp8", max_model_len=4096))
    assert "8 NVIDIA GB200" in lines and "over 2 nodes" in lines and "one NVLink domain of 72 GPUs" in lines
    assert "of one node" in commands(SimConfig(gpu="b200", model="llama-3.1-70b", tp=8, dtype="fp8",
                                              max_model_len=4096))


def test_the_planner_shards_attention_over_sixteen_gpus_only_where_nvlink_joins_them():
    from core.planner.space import Budget, Workload, shapes
    from core.serving.workload import WorkloadSpec
    w = Workload("deepseek-v3", WorkloadSpec(n_requests=200, rate=2.0, prompt_mean=1000, output_mean=300))
    found = {(d.gpu, d.tp, d.ep, d.dp_attention)
             for d in shapes(w, Budget(gpu_types=("b200", "gb200"), max_gpus=16, dtypes=("fp8",)))}
    assert ("gb200", 16, 16, False) in found and ("b200", 16, 16, False) not in found


def test_a_grace_host_takes_longer_for_the_engines_host_work_than_an_x86_one():
    # NVIDIA/TransformerEngine issue #2053: a PyTorch module's CPU time a call is 2.75 times an x86 Xeon's on Grace
    model = catalog.get_model("llama-3.1-8b")
    x86, grace = catalog.get_gpu("b200"), catalog.get_gpu("gb200")
    assert x86.host_time_factor == 1.0 and grace.host_time_factor > 2

    def step(gpu, **kw):
        return steptime(gpu, model, 1, launch="graph", engine="vllm", **kw)["breakdown_ms"]

    decode = dict(decode_batch=32, context=1000)
    assert step(grace, **decode)["scheduler"] == pytest.approx(grace.host_time_factor * step(x86, **decode)["scheduler"])
    # a small model's decode step is mostly host: the rack's GPU cannot make it up
    assert steptime(grace, model, 1, engine="vllm", **decode)["step_ms"] > steptime(x86, model, 1, engine="vllm",
                                                                                     **decode)["step_ms"]
    # the GPU's own work is the same silicon's
    assert step(grace, **decode)["attn_decode"] == pytest.approx(step(x86, **decode)["attn_decode"], rel=0.1)
