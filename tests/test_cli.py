"""`python -m core`: JSON on stdout, one-line errors with exit status 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_steptime_json():
    r = run("steptime", "--gpu", "h200", "--model", "llama-3.1-8b", "--tp", "1", "--decode-batch", "32",
            "--context", "2048", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["step_ms"] > 0 and out["comm_ms"] == 0
    assert out["step_ms"] == pytest.approx(sum(out["breakdown_ms"].values()))


def test_steptime_chunked_prefill_step_with_tp():
    r = run("steptime", "--gpu", "h100", "--model", "llama-3.1-70b", "--tp", "4", "--decode-batch", "16",
            "--context", "1024", "--prefill-tokens", "512", "--prefill-cached", "512", "--launch", "graph", "--json")
    out = json.loads(r.stdout)
    assert 0 < out["comm_ms"] < out["step_ms"]
    assert out["breakdown_ms"]["attn_prefill"] > 0 and out["breakdown_ms"]["attn_decode"] > 0


def _step(*args):
    r = run("steptime", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_steptime_prices_each_engine_s_cuda_graph_limit():
    """SGLang replays decode batches up to 256 sequences on an H100 and TensorRT-LLM up to 128
    (data/engines.json); a batch past both is issued kernel by kernel, whose host time a short
    step cannot hide, while vLLM replays it (its graphs go to 512 tokens)."""
    from core.physics import catalog
    from core.serving import engines
    assert engines.sglang_capture(catalog.get_gpu("h100"), 1) < 300 and engines.trtllm_capture(2048, False) < 300
    shape = ("--gpu", "h100", "--model", "llama-3.2-1b", "--context", "10")
    for engine in ("vllm", "sglang", "trtllm"):
        small = _step(*shape, "--decode-batch", "100", "--engine", engine)
        large = _step(*shape, "--decode-batch", "300", "--engine", engine)
        assert small["breakdown_ms"]["host_issue_wait"] == 0
        assert (large["breakdown_ms"]["host_issue_wait"] > 0) == (engine != "vllm"), engine


def test_steptime_data_parallel_attention_reads_each_rank_s_own_sequences():
    """Under tp 8 every GPU reads the latent KV of all 256 sequences; with the experts over 8 GPUs and
    attention data-parallel, each rank reads its own 32 sequences' and attends to them alone."""
    shape = ("--gpu", "h200", "--model", "deepseek-r1", "--decode-batch", "256", "--context", "2000", "--engine", "vllm")
    tp = _step(*shape, "--tp", "8")
    dp = _step(*shape, "--ep", "8", "--dp-attention")
    assert dp["kv_bytes_read_per_gpu"] == pytest.approx(tp["kv_bytes_read_per_gpu"] / 8, rel=0.01)
    assert dp["breakdown_ms"]["attn_decode"] < tp["breakdown_ms"]["attn_decode"] / 2
    assert dp["comm_ms"] == 0 < tp["comm_ms"]  # no all-reduce: the dispatch and combine move the tokens
    assert dp["breakdown_ms"]["all_to_all"] > 0 == tp["breakdown_ms"]["all_to_all"]
    assert (dp["ep"], dp["dp_attention"], tp["ep"], tp["dp_attention"]) == (8, True, 1, False)


def test_memory_json():
    out = json.loads(run("memory", "--gpu", "h100", "--model", "llama-3.1-70b", "--tp", "4", "--json").stdout)
    assert out["weights_gb_per_gpu"] == pytest.approx(35.3, abs=0.1)
    assert out["kv_blocks"] * 16 == out["kv_tokens"]
    assert out["kv_bytes_per_token"] == 81920


def test_memory_per_rank_under_expert_parallelism_and_data_parallel_attention():
    """DeepSeek-R1 on 8 H200s: whole experts over the GPUs hold the bytes the tp slices do; with attention
    data-parallel each GPU holds attention's weights whole, and each sequence's latent KV (replicated on
    every GPU under tp) on its own rank only, so the replica holds several times the tokens."""
    shape = ("memory", "--gpu", "h200", "--model", "deepseek-r1", "--json")
    tp, ep, dp = (json.loads(run(*shape, *a).stdout) for a in (("--tp", "8"), ("--ep", "8"), ("--ep", "8", "--dp-attention")))
    assert ep["weights_gb_per_gpu"] == pytest.approx(tp["weights_gb_per_gpu"], rel=0.01)
    assert dp["weights_gb_per_gpu"] > tp["weights_gb_per_gpu"] + 5
    assert dp["kv_tokens"] > 3 * tp["kv_tokens"]
    r = run("memory", "--gpu", "h200", "--model", "deepseek-r1", "--ep", "8", "--dp-attention")
    assert "attention ranks" in r.stdout and "68.6 KiB/token on the rank" in r.stdout


def test_catalog_json_lists_everything():
    out = json.loads(run("catalog", "--json").stdout)
    assert {"h100", "mi300x"} <= {g["id"] for g in out["gpus"]}
    assert {"deepseek-v3", "mixtral-8x7b"} <= {m["id"] for m in out["models"]}


@pytest.mark.parametrize("args", [
    ["steptime", "--gpu", "h900", "--model", "llama-3.1-8b", "--decode-batch", "1", "--context", "9"],
    ["steptime", "--gpu", "h200", "--model", "llama-3.1-8b", "--decode-batch", "many"],
    ["steptime", "--gpu", "h200", "--model", "llama-3.1-8b"],
    ["steptime", "--gpu", "h200", "--model", "llama-3.1-8b", "--ep", "2", "--decode-batch", "1", "--context", "9"],
    ["steptime", "--gpu", "h200", "--model", "deepseek-r1", "--tp", "8", "--dp-attention", "--decode-batch", "1",
     "--context", "9"],
    ["memory", "--gpu", "h100", "--model", "llama-3.1-70b", "--tp", "1"],
    ["memory", "--gpu", "h100"],
    ["memory", "--gpu", "h200", "--model", "deepseek-r1", "--ep", "3"],
    ["memory", "--gpu", "h200", "--model", "deepseek-r1", "--ep", "8", "--redundant-experts", "8"],
    ["nonsense"],
])
def test_bad_arguments_give_one_line_and_status_2(args):
    r = run(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_plan_finds_the_cheapest_deployment_and_its_frontier():
    r = run("plan", "--gpu", "h100", "--model", "llama-3.1-8b", "--rate", "44", "--prompt", "512", "--output", "256",
            "--dtypes", "bf16", "--max-gpus", "4", "--executor", "inline", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    best = out["cheapest"]
    assert best["gpus"] == 2 and best["replicas"] == 2 and best["meets"]  # one H100 cannot carry 44 req/s
    assert best["max_rate_req_s"] >= 44 and best["usd_per_hour"] == pytest.approx(2 * 3.99)
    assert out["frontier"] and all(f["meets"] for f in out["frontier"])
    c = out["counts"]
    assert c["simulated"] > 0 and c["pruned_roofline"] > 0


def test_plan_prices_and_bad_input():
    cheap = run("plan", "--gpu", "h100,h200", "--model", "llama-3.1-8b", "--rate", "4", "--max-gpus", "1",
                "--dtypes", "bf16", "--price", "h200=1.00", "--executor", "inline", "--json")
    assert json.loads(cheap.stdout)["cheapest"]["gpu"] == "h200"  # the overridden price makes it the cheaper one
    for args, says in ((["--price", "h100"], "GPU=DOLLARS_PER_HOUR"), (["--max-gpus", "0"], "GPU budget"),
                       (["--rate", "-1"], "request rate")):
        r = run("plan", "--gpu", "h100", "--model", "llama-3.1-8b", "--rate", "4", "--executor", "inline", *args)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_the_readmes_command_line_examples_run_as_written(tmp_path):
    # in a scratch folder, in order (one example may read what an earlier one wrote), with the
    # project's own files (fixtures) where an example names them
    readme = (ROOT / "README.md").read_text()
    examples = [line for line in readme.splitlines() if line.startswith(".venv/bin/python -m core ")]
    assert len(examples) >= 8
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for line in examples:
        args = [str(ROOT / a) if (ROOT / a).is_file() else a for a in line.split()[3:]]
        r = subprocess.run([sys.executable, "-m", "core", *args], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (line, r.stderr[-500:])


def test_an_overloaded_simulation_says_what_it_served_against_what_was_offered():
    r = run("simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--rate", "44", "--output", "256", "--requests", "2000")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "1 replica of tp=1 (1 GPU)" in first  # it read "1 replica(s)"
    assert "OVERLOADED, the queue grows without bound: " in first and " req/s served" in first


def test_pipeline_stages_from_the_command_line():
    r = run("simulate", "--gpu", "h100", "--model", "llama-3.1-405b", "--tp", "8", "--pp", "2", "--rate", "1",
            "--requests", "50", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["tp"], out["pp"], out["gpus"], out["replicas"]) == (8, 2, 16, 1)
    mem = json.loads(run("memory", "--gpu", "h100", "--model", "llama-3.1-405b", "--tp", "8", "--pp", "2",
                         "--json").stdout)
    assert mem["pp"] == 2 and mem["weights_gb_per_gpu"] < 60  # half the layers of 810 GB over 8 GPUs
    bad = run("simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--pp", "2", "--gpus", "3", "--requests", "5")
    assert bad.returncode == 2 and "multiple of 2" in bad.stderr and "Traceback" not in bad.stderr


def test_a_disaggregated_simulation_names_both_pools_in_its_text():
    r = run("simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--gpus", "8", "--disagg", "--prefill-gpus", "2",
            "--prefill-tp", "2", "--rate", "5", "--requests", "100")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    # one prefill replica of 2 GPUs and six decode replicas of one: the split the user asked for, not "8 replicas"
    assert "prefill pool: 1 replica of tp=2 (2 GPUs); decode pool: 6 replicas of tp=1 (6 GPUs)" in first
    assert "7 replicas" not in first and "8 replicas" not in first


def test_a_model_released_quantised_is_simulated_as_released_unless_told_otherwise():
    # DeepSeek-R1's only release is fp8 (128 x 128 blocks): 671B parameters fit eight H200s as released and
    # not in 16 bits, and a quantised repo's name says its format; --dtype still chooses
    base = ("simulate", "--gpu", "h200", "--tp", "8", "--concurrency", "4", "--requests", "8", "--prompt", "512",
            "--output", "64")
    released = run(*base, "--model", "deepseek-ai/DeepSeek-R1-0528")
    assert released.returncode == 0, released.stderr
    assert "weights: fp8" in released.stdout
    told = run(*base, "--model", "deepseek-ai/DeepSeek-R1-0528", "--dtype", "bf16")
    assert told.returncode == 2 and "does not fit" in told.stderr and "Traceback" not in told.stderr
    fp8 = json.loads(run(*base, "--model", "nvidia/Llama-3.3-70B-Instruct-FP8", "--json").stdout)
    bf16 = json.loads(run(*base, "--model", "meta-llama/Llama-3.3-70B-Instruct", "--json").stdout)
    assert fp8["tpot_ms"]["mean"] < bf16["tpot_ms"]["mean"]  # half the weight bytes a decode step streams
