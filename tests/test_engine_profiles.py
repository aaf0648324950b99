"""Engine profiles: SGLang's rule on the loop (prompt chunks in steps of their own, decodes paused
while prompts wait), the defaults it picks for a GPU, its CUDA graphs (decode batches only), and the
command line and the benchmark replay that take it; TensorRT-LLM's CUDA graphs (decode batches only,
up to its capture limit) and defaults."""
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.cli.main import main
from core.physics import catalog, costmodel, hfconfig, memory
from core.serving import engines
from core.serving.command import on_engine, simulate_command
from core.serving.serve_command import commands
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import Workload, WorkloadSpec
from tests import calibration_script
from tests.test_reproduce import cli_config

ROOT = Path(__file__).resolve().parent.parent

PROMPTS = WorkloadSpec(n_requests=400, rate=8.0, prompt_mean=2000, output_mean=200, length_dist="lognormal")


def run(policy="sglang", **kw):
    return simulate(SimConfig(**{**dict(gpu="h100", model="llama-3.1-8b", policy=policy, max_batched_tokens=4096,
                                        chunk=1024, workload=PROMPTS), **kw}))


def test_an_sglang_step_never_mixes_prompt_tokens_with_decodes_where_vllm_v1_does():
    sglang, sarathi = run("sglang", engine_overhead="sglang"), run("sarathi")
    mixed = [int(((np.asarray(r.trace["prefill_tokens"]) > 0) & (np.asarray(r.trace["decode_tokens"]) > 0)).sum())
             for r in (sglang, sarathi)]
    assert mixed[0] == 0 and mixed[1] > 0
    # the decodes wait while prompts run alone: the longest gaps between a request's tokens grow
    assert sglang.summary["itl_ms"]["p99"] > sarathi.summary["itl_ms"]["p99"]


def test_a_prompt_longer_than_the_chunk_takes_more_steps_the_smaller_the_chunk():
    one = WorkloadSpec(n_requests=1, rate=1.0, prompt_mean=8192, output_mean=4, length_dist="fixed")
    ttft = [run("sglang", workload=one, chunk=c, max_batched_tokens=8192).summary["ttft_ms"]["p50"]
            for c in (512, 2048, 8192)]
    assert ttft[0] > ttft[1] > ttft[2]


@pytest.mark.parametrize("gpu,tp,chunk,graphs", [("h100", 1, 8192, 256), ("h100", 8, 8192, 512), ("h200", 2, 8192, 256),
                                                 ("l40s", 1, 4096, 32), ("b200", 1, 16384, 512)])
def test_sglang_picks_its_chunk_and_cuda_graph_size_by_the_gpus_memory(gpu, tp, chunk, graphs):
    d = engines.sglang_defaults(catalog.get_gpu(gpu), tp)
    capture = engines.sglang_capture(catalog.get_gpu(gpu), tp)
    assert (d["chunk"], d["max_batched_tokens"], capture, d["policy"]) == (chunk, chunk, graphs, "sglang")
    assert engines.sglang_defaults(catalog.get_gpu(gpu), 8, dp_attention=True)["chunk"] == chunk // 8


def test_the_command_line_runs_sglangs_profile_and_keeps_a_flag_the_user_gives(capsys):
    cmd = "python -m core simulate --gpu h100 --model llama-3.1-8b --engine sglang"
    cfg = cli_config(cmd)
    assert (cfg.policy, cfg.max_batched_tokens, cfg.max_seqs, cfg.engine_overhead) == ("sglang", 8192, 2048, "sglang")
    own = cli_config(cmd + " --policy vllm")
    assert own.policy == "vllm" and own.max_batched_tokens == 8192
    assert cli_config(simulate_command(cfg)) == cfg  # the reproduce command carries it
    assert main(["simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "sgl"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_sglangs_server_shows_in_the_clients_ttft():
    light = WorkloadSpec(n_requests=50, rate=0.5, prompt_mean=256, output_mean=16, length_dist="fixed")
    base = dict(policy="sglang", workload=light)
    served = run(engine_overhead="sglang", **base).summary["ttft_ms"]["p50"]
    offline = run(engine_overhead="sglang", api_server=False, **base).summary["ttft_ms"]["p50"]
    assert served - offline == pytest.approx(engines.profiles()["sglang"]["server_ttft_ms"]["value"], rel=0.2)


def test_an_sglang_benchmark_file_replays_with_sglangs_profile(capsys):
    sgl = Path(__file__).parent / "fixtures" / "bench" / "sglang-dec2024_llama-3.3-70b_tp4_4xh200_online.jsonl"
    assert main(["calibrate", str(sgl), "--gpu", "h200", "--model", "llama-3.1-70b", "--line", "1",
                 "--compare-only"]) == 0
    assert "sglang with 8192 tokens per step" in capsys.readouterr().out


def test_sglang_issues_a_prompts_step_op_by_op_so_its_length_barely_moves_it():
    # measured (SGLang cookbook, DeepSeek-R1 on 8x B200, one request at a time): the first token of a
    # 610-token prompt after 126-153 ms, of a 4,194-token one after 155-166 ms
    gpu, model = catalog.get_gpu("h200"), catalog.get_model("deepseek-v3")

    def prompt_step(engine, tokens):
        return costmodel.steptime(gpu, model, 8, prefill_tokens=tokens, dtype="fp8", engine=engine)["step_ms"]

    sglang = [prompt_step("sglang", t) for t in (64, 1024)]
    vllm = [prompt_step("vllm", t) for t in (64, 1024)]
    assert sglang[1] < 1.1 * sglang[0]  # the host's issue of every layer, whatever the length
    assert vllm[1] > 1.5 * vllm[0]  # vLLM's graph pieces leave the GPU's work on the path
    assert sglang[0] > 3 * vllm[0]
    # a decode batch replays a graph in both: no layer's issue on its path
    decode = costmodel.steptime(gpu, model, 8, decode_batch=8, context=1000, dtype="fp8", engine="sglang")
    assert decode["breakdown_ms"]["host_issue_wait"] == 0


def test_a_prompt_the_cache_already_holds_costs_sglang_a_prompt_step_and_vllm_a_decode():
    # SGLang runs every prompt as an extend batch, op by op, however little of it is left to compute:
    # the cookbook's DeepSeek-R1 on 8x B200 answers prompts an earlier run on the server had sent (its
    # 1K/8K scenario after its 1K/1K one, sglang.bench_serving's seed 1 drawing the same prompts) after
    # 126 ms at one request at a time, near the 141 ms of the uncached ones
    n, prompt, output = 12, 6000, 40
    wl = Workload(np.zeros(n), np.full(n, prompt), np.full(n, output))
    warm = replace(wl, cached_tokens=np.full(n, prompt))  # all but the last token, which computes
    spec = WorkloadSpec(n_requests=n, rate=math.inf, concurrency=1, prompt_mean=prompt, output_mean=output)
    base = dict(gpu="b200", model="deepseek-v3", tp=8, dtype="fp8", workload=spec)
    sglang = dict(base, **engines.sglang_defaults(catalog.get_gpu("b200"), 8))
    ttft = {(k, w is warm): simulate(SimConfig(**cfg), workload=w).summary["ttft_ms"]["p50"]
            for k, cfg in (("sglang", sglang), ("vllm", base)) for w in (wl, warm)}
    tpot = {k: simulate(SimConfig(**base), workload=w).summary["tpot_ms"]["p50"] for k, w in (("cold", wl), ("warm", warm))}
    assert ttft["vllm", True] < 0.25 * ttft["vllm", False]  # one token's step instead of 6,000 tokens'
    assert ttft["sglang", True] > 0.6 * ttft["sglang", False]  # the layers' issue either way
    assert ttft["sglang", True] > 3 * ttft["vllm", True]
    assert tpot["warm"] == pytest.approx(tpot["cold"], rel=0.02)  # decode reads the whole context either way


def test_under_sglang_an_moe_models_tpot_climbs_with_concurrency_as_measured():
    # SGLang cookbook, DeepSeek-R1-0528 on 8x B200 (sgl-project/sgl-cookbook @ 268193cc, DeepSeek-R1.md):
    # 1K/1K random prompts, mean TPOT 9.16 ms at one request at a time and 40.11 ms at 100. The pace at
    # 100 is mostly the prompts' steps that pause the decodes: a model that missed them would climb half as fast
    def tpot(concurrency, n):
        spec = WorkloadSpec(n_requests=n, rate=float("inf"), concurrency=concurrency, prompt_mean=500,
                            output_mean=500, length_dist="uniform", spread=1.0)
        cfg = SimConfig(gpu="b200", model="deepseek-v3", tp=8, dtype="fp8", workload=spec,
                        **engines.sglang_defaults(catalog.get_gpu("b200"), 8))
        return simulate(cfg).summary["tpot_ms"]["mean"]

    one, hundred = tpot(1, 50), tpot(100, 500)
    assert one == pytest.approx(9.16, rel=0.2)
    assert hundred / one == pytest.approx(40.11 / 9.16, rel=0.25)


@pytest.mark.parametrize("gpu, budget, seqs", [("h100", 8192, 1024), ("mi300x", 8192, 1024), ("a100-80gb", None, None),
                                               ("l40s", None, None)])
def test_the_command_line_says_what_vllm_left_at_its_defaults_would_take_on_the_gpu(gpu, budget, seqs, capsys):
    # vLLM gives GPUs of 70 GiB and more, bar the A100, a larger budget and batch; the Lab keeps one pair
    main(["simulate", "--gpu", gpu, "--model", "llama-3.1-8b", "--requests", "200"])
    out = capsys.readouterr().out
    if budget is None:
        assert "vLLM's server left at its defaults" not in out
        return
    flags = f"--max-batched-tokens {budget} --max-seqs {seqs}"
    assert flags in out
    main(["simulate", "--gpu", gpu, "--model", "llama-3.1-8b", "--requests", "200", *flags.split()])
    assert "vLLM's server left at its defaults" not in capsys.readouterr().out


def test_vllm_offline_takes_a_larger_budget_than_its_server_on_a_large_gpu():
    h100, l40s = catalog.get_gpu("h100"), catalog.get_gpu("l40s")
    assert engines.vllm_batch_defaults(h100, offline=True)[0] > engines.vllm_batch_defaults(h100)[0]
    assert engines.vllm_batch_defaults(l40s, offline=True)[0] > engines.vllm_batch_defaults(l40s)[0]
    assert engines.vllm_batch_defaults(l40s)[1] < engines.vllm_batch_defaults(h100)[1]


def test_offline_takes_vllms_llm_class_defaults_for_the_gpu_and_a_flag_stays_the_users_whatever_its_value():
    base = "python -m core simulate --model llama-3.1-8b --requests 200"
    h100, l40s = cli_config(f"{base} --gpu h100 --offline"), cli_config(f"{base} --gpu l40s --offline")
    assert (h100.max_batched_tokens, h100.max_seqs) == (16384, 1024)  # vLLM's LLM class on a GPU of 70 GiB and more
    assert (l40s.max_batched_tokens, l40s.max_seqs) == (8192, 256)
    # a flag given at the Lab's value is still the user's, under either engine
    kept = cli_config(f"{base} --gpu h100 --offline --max-seqs 256 --max-batched-tokens 2048")
    assert (kept.max_batched_tokens, kept.max_seqs) == (2048, 256)
    assert cli_config(f"{base} --gpu h100 --engine sglang --max-seqs 256").max_seqs == 256
    assert cli_config(f"{base} --gpu h100 --engine sglang --policy sarathi").policy == "sarathi"
    sglang = [cli_config(f"{base} --gpu h100 --engine sglang {flags}") for flags in
              ("", "--policy sarathi", "--policy sarathi --max-batched-tokens 4096", "--chunk 2048")]
    for cfg in (h100, l40s, kept, *sglang):  # and the reproduce command says so, or leaves it to the same default
        assert cli_config(simulate_command(cfg)) == cfg


def test_sglang_on_rocm_decodes_deepseek_at_the_cookbooks_pace_and_cuda_gpus_keep_theirs():
    # SGLang cookbook, DeepSeek-V3.1 fp8 on 8 MI300X (ROCm, SGLang 0.5.7), 1K/1K random at one request:
    # 23.84 ms mean TPOT; the CUDA-fitted kernels alone gave 10.7 ms
    def tpot(gpu):
        spec = WorkloadSpec(n_requests=50, rate=math.inf, concurrency=1, prompt_mean=610.1, output_mean=422.0,
                            length_dist="uniform", spread=1.0)
        return simulate(SimConfig(gpu=gpu, model="deepseek-v3", tp=8, dtype="fp8", workload=spec,
                                  **engines.sglang_defaults(catalog.get_gpu(gpu), 8))).summary["tpot_ms"]["mean"]
    assert tpot("mi300x") == pytest.approx(23.84, rel=0.2)
    b200 = tpot("b200")
    eff = costmodel.fitted()
    assert b200 == pytest.approx(9.16, rel=0.2)  # the B200 runs' figure: ROCm's constant is ROCm's alone
    assert eff.sglang_rocm_fp8_layer_us > 0


def test_sglang_on_rocm_decodes_16_bit_layers_at_the_cuda_pace_and_block_fp8_ones_slower():
    # SGLang cookbook on 8 MI300X, 1K/1K random at one request (calibration/moe_runs.json): Llama-4 Scout and
    # Maverick in bf16 (SGLang 0.5.9) 7.49 and 5.95 ms mean TPOT, Qwen3-Coder-480B-A35B with block-scaled fp8
    # weights (0.5.7) 17.06 ms. ROCm's extra a layer taken on every layer made the bf16 ones 16 ms
    def tpot(config, dtype):
        model = hfconfig.parse((ROOT / config).read_bytes(), config).model
        # the fp8 checkpoint scales its weights by 128 x 128 blocks, which the BF16 model's config does not say
        model = catalog.register_model(replace(model, fp8_block_scales=dtype == "fp8"))
        spec = WorkloadSpec(n_requests=50, rate=math.inf, concurrency=1, prompt_mean=610.1, output_mean=422.0,
                            length_dist="uniform", spread=1.0)
        return simulate(SimConfig(gpu="mi300x", model=model.id, tp=8, dtype=dtype, workload=spec,
                                  **engines.sglang_defaults(catalog.get_gpu("mi300x"), 8))).summary["tpot_ms"]["mean"]
    assert tpot("calibration/configs/llama-4-scout-17b-16e.json", "bf16") == pytest.approx(7.49, rel=0.25)
    assert tpot("calibration/configs/llama-4-maverick-17b-128e.json", "bf16") == pytest.approx(5.95, rel=0.25)
    coder = "calibration/configs/qwen3-coder-480b-a35b.json"
    # slower than the CUDA pace, within the spread of a constant fitted to another model's layers on another
    # kernel path (DeepSeek-V3.1's latent attention on aiter; this run's Triton kernels, SGLANG_USE_AITER=0),
    # on top of the four activation-quantising kernels every block-fp8 layer runs on either vendor
    assert 17.06 < tpot(coder, "fp8") < 17.06 * 1.35


def test_the_cookbook_runs_replay_the_requests_sglangs_benchmark_drew_and_what_the_server_had_cached():
    # seed 1's draw is each run's own: its prompt and output token totals are the page's, to rounding
    bench = calibration_script.load("bench_serving")
    moe = json.loads((ROOT / "calibration" / "moe_runs.json").read_text())["runs"]
    drawn = [r for r in moe if r["id"].startswith("sglang-cookbook") and r["dataset"] == "random"]
    assert drawn and all("bench_lengths" in r for r in drawn)
    for r in drawn:
        prompt, output = bench.lengths(r["bench_lengths"], r["requests"])
        assert prompt.mean() == pytest.approx(r["prompt_mean"], abs=0.06), r["id"]
        assert output.mean() == pytest.approx(r["output_mean"], abs=0.06), r["id"]
    # a run's prompts are cached as far as the runs before it on the server sent them; the warm-up's always
    family = {r["id"]: r for r in json.loads((ROOT / "calibration" / "family_runs.json").read_text())["entries"]}
    c100 = family["a100x8-llama31-70b-bf16-tp8-c100-random-1000in-1000out-sglang056-cookbook"]
    earlier = [family[i] for i in c100["server_before"]]
    wl = bench.workload(c100, earlier, pool_tokens=1e9)
    assert (wl.cached_tokens[:80] == wl.prompt_tokens[:80]).all() and (wl.cached_tokens[80:] == 0).all()
    tight = bench.workload(c100, earlier, pool_tokens=1.0)  # a pool that held nothing of theirs
    assert tight.cached_tokens[0] == tight.prompt_tokens[0] and (tight.cached_tokens[1:] == 0).all()


def test_norms_over_all_the_heads_cost_an_all_reduce_a_layer_where_gpus_share_the_heads():
    # MiniMax-M2's query and key norms span every head: vLLM and SGLang all-reduce each token's sums of squares
    # over the attention's GPUs in every layer (one GPU needs none). The SGLang cookbook's MiniMax-M2.5 (M2's
    # layers) on 8 H100s with --ep 8, 1K/1K random at one request: 8.05 ms mean TPOT (calibration/moe_runs.json);
    # without the all-reduce the step came out 16% short of it
    m2 = catalog.get_model("minimax-m2")
    plain = catalog.register_model(replace(m2, qk_norm_allreduce=False))
    h100 = catalog.get_gpu("h100")
    one = dict(decode_batch=1, context=1000, dtype="fp8", engine="sglang")
    tp8 = costmodel.steptime(h100, m2, tp=8, ep=8, **one)["comm_ms"] - costmodel.steptime(h100, plain, tp=8, ep=8, **one)["comm_ms"]
    latency_ms = costmodel.allreduce_latency_us(h100, 8, costmodel.fitted()) / 1e3
    assert tp8 == pytest.approx(m2.layers * latency_ms, rel=0.05)  # a latency-bound all-reduce a layer
    assert costmodel.steptime(h100, m2, tp=1, **one)["comm_ms"] == 0.0
    spec = WorkloadSpec(n_requests=50, rate=math.inf, concurrency=1, prompt_mean=610.1, output_mean=422.0,
                        length_dist="uniform", spread=1.0)
    tpot = simulate(SimConfig(gpu="h100", model="minimax-m2", tp=8, ep=8, dtype="fp8", workload=spec,
                              **engines.sglang_defaults(h100, 8))).summary["tpot_ms"]["mean"]
    assert tpot == pytest.approx(8.05, rel=0.1)


def test_trtllm_issues_a_step_with_prompt_tokens_op_by_op_and_replays_decode_graphs_up_to_its_limit():
    gpu, model = catalog.get_gpu("b200"), catalog.get_model("qwen3-30b-a3b")

    def step(engine, capture=128, **kw):
        return costmodel.steptime(gpu, model, 1, dtype="fp4", launch="graph", engine=engine, capture_tokens=capture,
                                  **kw)

    mixed = dict(decode_batch=64, context=1500, prefill_tokens=1024)
    # 48 MoE layers issued from Python: the host, not the GPU, sets a mixed step's pace
    assert step("trtllm", **mixed)["step_ms"] > 2 * step("vllm", **mixed)["step_ms"]
    assert step("trtllm", **mixed)["breakdown_ms"]["host_issue_wait"] > 0
    # a decode batch within the captured sizes replays a graph; past them it runs eagerly
    assert step("trtllm", decode_batch=128, context=1500)["breakdown_ms"]["host_issue_wait"] == 0
    assert step("trtllm", decode_batch=512, context=1500)["step_ms"] > step(
        "trtllm", capture=512, decode_batch=512, context=1500)["step_ms"]


def test_the_command_line_runs_trtllms_profile_with_trtllm_benchs_graphs_offline(capsys):
    cmd = "python -m core simulate --gpu b200 --model qwen3-30b-a3b --dtype fp4 --engine trtllm --requests 200"
    assert main(cmd.split()[3:]) == 0
    assert "TensorRT-LLM's profile" in capsys.readouterr().out.splitlines()[0]  # the header says whose rules ran
    cfg = cli_config(cmd)
    assert (cfg.policy, cfg.max_batched_tokens, cfg.max_seqs, cfg.engine_overhead) == ("vllm", 8192, 2048, "trtllm")
    assert cli_config(cmd + " --max-seqs 256").max_seqs == 256
    for c in (cfg, cli_config(cmd + " --offline --max-seqs 512 --policy sarathi")):
        assert cli_config(simulate_command(c)) == c  # the reproduce command carries it
    assert engines.trtllm_capture(2048, offline=False) == 128  # DecodeCudaGraphConfig's default
    assert engines.trtllm_capture(700, offline=True) == 700  # trtllm-bench: its batch limit


def test_trtllms_offline_throughput_of_light_moe_sequences_is_the_hosts_under_its_profile():
    # TensorRT-LLM's performance overview: Qwen3-30B-A3B FP4 on one B200, 1,024 tokens in and out, all at once
    entry = next(e for e in json.loads((ROOT / "calibration" / "offline_runs.json").read_text())["entries"]
                 if e["id"] == "trtllm120-qwen3-30b-a3b-b200-tp1-fp4-1024in-1024out")
    replay = entry["replay"][0]
    measured = float(entry["measured"][replay["measured"]])

    def per_gpu(command):
        summary = simulate(cli_config(command)).summary
        return summary["completed_tok_s"] / summary["gpus"]

    assert "--engine trtllm" in replay["command"]
    trtllm = per_gpu(replay["command"]) / measured - 1
    vllm = per_gpu(replay["command"].replace(" --engine trtllm", "")) / measured - 1
    assert abs(trtllm) < 0.25
    assert abs(trtllm) < abs(vllm) / 2



def test_trtllm_decodes_deepseek_one_request_at_a_time_at_its_blogs_pace_with_and_without_mtp():
    # TensorRT-LLM's latency blog: DeepSeek-R1 FP4 on 8 B200, one request at a time, 1K tokens in and 2K out: 111 tok/s
    # a user without MTP, and with 1 to 5 MTP passes at the acceptance it measured for each, a peak at 3 (253 tok/s)
    entries = {e["id"]: e for e in json.loads((ROOT / "calibration" / "offline_runs.json").read_text())["entries"]
               if e["id"].startswith("trtllm-blog1-deepseek-r1-b200")}
    assert len(entries) == 6

    def error(entry):
        replay = entry["replay"][0]
        summary = simulate(cli_config(replay["command"])).summary
        return summary["completed_tok_s"] / summary["gpus"] / float(entry["measured"][replay["measured"]]) - 1

    errors = {entry_id.rsplit("-", 1)[-1]: error(e) for entry_id, e in entries.items()}  # c1, mtp1 ... mtp5
    assert all(abs(err) < 0.15 for err in errors.values()), errors
    rate = {k: (1 + errors[k]) * e["measured"]["per_user_output_tok_s"] for k, e in zip(errors, entries.values())}
    assert rate["mtp3"] > rate["mtp1"] > rate["c1"] and rate["mtp5"] < rate["mtp3"], rate


def test_in_flight_batching_runs_whole_prompts_beside_the_decodes_and_vllms_prefill_first_rule_apart():
    # TensorRT-LLM's in-flight batching (policy inflight): a step carries the decodes and the whole prompts its
    # token budget holds beside them; vLLM's prefill-first rule (policy vllm) runs prompts in steps of their own
    from core.serving.simulate import SimConfig, simulate
    from core.serving.workload import WorkloadSpec
    base = SimConfig(gpu="h100", model="llama-3.1-8b", max_batched_tokens=8192, max_seqs=256,
                     workload=WorkloadSpec(n_requests=300, rate=20.0, prompt_mean=1000, output_mean=200,
                                           length_dist="fixed"))
    for policy, mixed in (("inflight", True), ("vllm", False)):
        t = simulate(replace(base, policy=policy)).trace
        pre, dec = t["prefill_tokens"], t["decode_tokens"]
        assert ((pre > 0) & (dec > 0)).any() == mixed, policy
        assert (pre % 1000 == 0).all(), policy  # a prompt is never split over steps


def _sglang_share(gpu: str, tp: int, graph_bs: int, chunk: int, dp_ranks: int = 0) -> float:
    """SGLang's mem_fraction_static as server_args.py's _handle_gpu_memory_settings writes it (MiB)."""
    mib = catalog.get_gpu(gpu).memory_gib * 1024
    reserve = 512 + 1.5 * max(chunk, 2048) + tp / 8 * 1024 + 2 * graph_bs
    reserve += dp_ranks * graph_bs * (3 + (1.5 if graph_bs > 300 else 0))
    return round((mib - max(reserve, 10 * 1024 if mib > 60 * 1024 else 0)) / mib, 3)


@pytest.mark.parametrize("gpu,tp,graph_bs,chunk", [("h100", 1, 256, 8192), ("h200", 8, 512, 8192),
                                                   ("l40s", 1, 32, 4096), ("b200", 1, 512, 16384)])
def test_sglang_gives_the_weights_and_kv_pool_its_own_share_of_the_gpu_and_keeps_the_workspace_outside(
        gpu, tp, graph_bs, chunk):
    model = catalog.get_model("llama-3.1-8b" if tp == 1 else "llama-3.1-70b")
    g = catalog.get_gpu(gpu)
    rules = engines.kv_memory("sglang", g, tp)
    assert rules["mem_util"] == _sglang_share(gpu, tp, graph_bs, chunk)
    plan = memory.plan_memory(g, model, tp, **rules)
    # weights and pool fill the share; the workspace lives in what the share leaves
    assert plan.weights_bytes + plan.kv_pool_bytes == pytest.approx(rules["mem_util"] * plan.usable_bytes)
    assert plan.usable_bytes * (1 - rules["mem_util"]) > plan.workspace_bytes


def test_data_parallel_attention_shrinks_sglangs_share_for_the_padding_of_the_ranks_joined_batches():
    g, model = catalog.get_gpu("h200"), catalog.get_model("deepseek-r1")
    tp = engines.kv_memory("sglang", g, 8, dp_attention=False)["mem_util"]
    dp = engines.kv_memory("sglang", g, 8, dp_attention=True)["mem_util"]
    assert dp == _sglang_share("h200", 8, 512, 8192, dp_ranks=8) and dp < tp - 0.1
    # the Lab's and the planner's under vLLM are unchanged by it
    assert engines.kv_memory("vllm", g, 8, dp_attention=True)["mem_util"] == memory.MEM_UTIL


def test_a_share_the_user_sets_under_sglang_is_its_mem_fraction_static_in_the_plan_and_the_serving_line(capsys):
    g, model = catalog.get_gpu("h100"), catalog.get_model("llama-3.1-8b")
    plan = memory.plan_memory(g, model, **engines.kv_memory("sglang", g, 1, mem_util=0.8))
    assert plan.weights_bytes + plan.kv_pool_bytes == pytest.approx(0.8 * plan.usable_bytes)
    # on an 80 GB GPU SGLang's own share keeps at least 10 GiB back: more than vLLM's 10% and its workspace
    own, vllm = (memory.plan_memory(g, model, **engines.kv_memory(e, g, 1)) for e in ("sglang", "vllm"))
    assert own.kv_tokens < vllm.kv_tokens and own.usable_bytes - own.budget_bytes >= 10 * 2**30 * 0.999
    assert main(["memory", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert f"weights and KV cache {_sglang_share('h100', 1, 256, 8192):.1%}" in out and "workspace in the rest" in out
    cfg = cli_config("python -m core simulate --gpu h100 --model llama-3.1-8b --engine sglang --mem-util 0.8")
    assert "--mem-fraction-static 0.8" in commands(cfg)
    assert "--mem-fraction-static" not in commands(replace(cfg, mem_util=memory.MEM_UTIL))


def test_the_lab_shards_a_model_as_wide_as_sglangs_share_needs_to_hold_a_request():
    # a 16-bit 70B over two H100s leaves SGLang's share a pool of fewer tokens than one 2,304-token request
    from core.lab.inputs import LabInputs, current_config, min_tp, run
    seventy = LabInputs(model="llama-3.1-70b", gpu="h100", gpus=8, tensor_parallel=True, rate=10, prompt_tokens=2048,
                        output_tokens=256)
    assert min_tp(seventy) == 2 and min_tp(replace(seventy, engine="sglang")) == 4
    assert run(current_config(replace(seventy, engine="sglang", tp=4))).summary["requests"] > 0


def test_the_labs_tp_sweep_says_a_degree_fits_where_the_engines_cache_holds_a_request():
    from core.lab.inputs import LabInputs
    from core.lab.sweeps import sweep_tp
    long_prompts = LabInputs(model="llama-3.1-70b", gpu="h100", gpus=8, prompt_tokens=4096, output_tokens=256)
    first = {e: next(r["tp"] for r in sweep_tp(replace(long_prompts, engine=e)) if r["fits"]) for e in ("vllm", "sglang")}
    assert first == {"vllm": 2, "sglang": 4}


def test_sglangs_split_servers_reserve_for_their_own_kind_of_step_and_hold_more_cache():
    # a decode server (--disaggregation-mode decode) reserves for its decode batch, not a chunk; a prefill
    # server nothing for decode graphs: on 8 H200 both keep less back than a server that runs both
    g, model = catalog.get_gpu("h200"), catalog.get_model("llama-3.1-70b")
    share = {role: engines.kv_memory("sglang", g, 8, role=role)["mem_util"]
             for role in ("serving", "prefill", "decode")}
    mib = 141 * 1024
    assert share["prefill"] == round((mib - (512 + 1.5 * 8192 + 1024)) / mib, 3)
    assert share["decode"] == round((mib - 10 * 1024) / mib, 3)  # 512 + 1.5 x 2,048 + 1,024 + 2 x 512 < the floor
    assert share["serving"] < share["prefill"] < share["decode"]
    cfg = on_engine(SimConfig(gpu="h200", model="llama-3.1-70b", tp=8, gpus=16, disagg=True, prefill_gpus=8,
                              workload=WorkloadSpec(n_requests=20, rate=1.0)), "sglang")
    colocated = on_engine(SimConfig(gpu="h200", model="llama-3.1-70b", tp=8, workload=cfg.workload), "sglang")
    blocks = {r: p.plan.kv_blocks for r, p in zip(("prefill", "decode"), simulate(cfg).pools)}
    assert simulate(colocated).pools[0].plan.kv_blocks < blocks["prefill"] < blocks["decode"]
