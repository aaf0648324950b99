"""The serving engine a person picks (vLLM V1, SGLang, TensorRT-LLM): the Lab, its recommendation and
the planner simulate the deployment as that engine runs it out of the box, say how far to trust it,
and end in that engine's own serving command, every flag of which is a sourced one."""
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from core.cli.main import main
from core.lab.inputs import LabInputs, current, current_config, stage_config
from core.lab.recommend import recommend
from core.lab.trust import nearest, trust
from core.physics import catalog
from core.planner.plan import plan
from core.planner.search import check_config
from core.planner.space import Budget, Deployment, Engine, Targets, Workload, shapes
from core.serving import serve_command
from core.serving.command import on_engine
from core.serving.engines import SERVING
from core.serving.simulate import SimConfig
from core.serving.stepspread import engine_margin, run_engine, validation
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
ENGINES = json.loads((ROOT / "core" / "data" / "engines.json").read_text())
RECIPES = json.loads((ROOT / "core" / "data" / "recipes.json").read_text())
PROGRAMS = {"vllm": "vllm serve ", "sglang": "python3 -m sglang.launch_server ", "trtllm": "trtllm-serve "}


def sourced(engine: str) -> str:
    return " ".join(RECIPES[engine]["sources"].values())


def serving_lines(text: str, engine: str) -> list[list[str]]:
    """The arguments of each serving line in a deployment's commands (its trailing note dropped)."""
    return [shlex.split(line.split("  #")[0]) for line in text.splitlines() if line.startswith(PROGRAMS[engine])]


def options_files(text: str) -> list[dict]:
    """The options files a TensorRT-LLM deployment's lines write before each trtllm-serve."""
    return [yaml.safe_load(body) for body in re.findall(r"<<'EOF'\n(.*?)\nEOF\n", text, re.S)]


def test_sglang_runs_its_own_rule_and_chunk_for_the_gpu_whatever_vllms_knobs_say():
    h100 = catalog.get_gpu("h100")
    chunk = next(row[1] for row in ENGINES["sglang"]["chunked_prefill_size"]["by_memory_gib"] if h100.memory_gib < row[0])
    cfg = current_config(LabInputs(engine="sglang"))
    assert (cfg.policy, cfg.engine_overhead, cfg.chunk) == ("sglang", "sglang", chunk)
    assert cfg.max_seqs == ENGINES["sglang"]["max_running_requests"]["value"]
    # vLLM's token budget, max batch and chunked-prefill toggle are not SGLang's settings
    assert current_config(LabInputs(engine="sglang", max_batched_tokens=512, max_seqs=64, chunked_prefill=False)) == cfg
    # the teaching stages keep their rule and take the engine's host only
    static = stage_config(LabInputs(engine="sglang"), 2)
    assert (static.policy, static.engine_overhead) == ("static", "sglang")


def test_trtllm_runs_whole_prompts_at_its_own_limits():
    cfg = current_config(LabInputs(engine="trtllm"))
    budget, seqs = ENGINES["trtllm"]["batch_limits"]["value"]
    assert (cfg.policy, cfg.chunk, cfg.max_batched_tokens, cfg.max_seqs) == ("vllm", None, budget, seqs)


def test_the_engines_give_different_figures_for_one_deployment():
    p99 = {e: current(LabInputs(engine=e, rate=12))[1].summary["ttft_ms"]["p99"] for e in SERVING}
    assert len({round(v, 3) for v in p99.values()}) == 3


def test_an_unknown_engine_is_a_sentence_naming_the_choices():
    with pytest.raises(ValueError, match="vllm, sglang, trtllm"):
        LabInputs(engine="tgi").validate()
    with pytest.raises(ValueError, match="vllm, sglang, trtllm"):
        on_engine(SimConfig(), "tgi")


def test_tensorrt_llm_is_refused_on_an_amd_gpu_and_never_planned_there():
    with pytest.raises(ValueError, match="NVIDIA GPUs only.*choose vLLM or SGLang"):
        LabInputs(engine="trtllm", gpu="mi300x").validate()
    LabInputs(engine="sglang", gpu="mi300x").validate()
    w = Workload("llama-3.1-8b", WorkloadSpec(n_requests=100, rate=2), Targets(), Engine(name="trtllm"))
    assert {d.gpu for d in shapes(w, Budget(gpu_types=("h100", "mi300x"), max_gpus=2))} == {"h100"}
    with pytest.raises(ValueError, match="NVIDIA GPUs only"):
        plan(w, Budget(gpu_types=("mi300x",), max_gpus=2), executor="inline")


@pytest.mark.parametrize("engine", SERVING)
def test_each_engines_recommendation_ends_in_its_own_command_and_image(engine):
    rec = recommend(LabInputs(engine=engine, model="llama-3.1-70b", gpus=8, rate=8))
    assert rec.met
    (args,) = serving_lines(rec.serve, engine)
    d = rec.deployment
    tp = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "trtllm": "--tp_size"}[engine]
    assert args[args.index(tp) + 1] == str(d.tp)
    (pod,) = [doc for doc in yaml.safe_load_all(rec.manifest) if doc["kind"] == "Deployment"]
    container = pod["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == RECIPES[engine]["image"] and container["ports"][0]["containerPort"] == RECIPES[engine]["port"]
    assert pod["spec"]["replicas"] == d.replicas


SHAPES = {
    "dense": dict(model="llama-3.1-70b", gpu="h100", tp=4, gpus=8, dtype="fp8", kv_dtype="fp8", prefix_caching=False),
    "mixture": dict(model="deepseek-v3", gpu="h200", tp=8, gpus=16, dtype="fp8", ep=8, dp_attention=True, eplb=True,
                    redundant_experts=8, micro_batch_overlap=True, spec_method="mtp"),
    "split": dict(model="llama-3.1-8b", gpu="h100", tp=1, gpus=4, disagg=True, prefill_gpus=2, prefill_tp=1, decode_tp=1,
                  kv_offload_gb=64, router="prefix", spec_method="eagle3"),
    "pipeline": dict(model="llama-3.1-405b", gpu="h100", tp=8, pp=2, gpus=16, dtype="fp8"),
    "one request at a time": dict(model="llama-3.1-8b", gpu="h100", policy="serial", mem_util=0.8),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_sglang_flag_is_one_its_sources_quote(shape):
    cfg = on_engine(SimConfig(**SHAPES[shape]), "sglang")
    lines = serving_lines(serve_command.commands(cfg), "sglang")
    assert lines
    for args in lines:
        for flag in (a for a in args if a.startswith("--")):
            assert flag in sourced("sglang"), flag


@pytest.mark.parametrize("shape", SHAPES)
def test_every_trtllm_flag_and_option_is_one_its_sources_quote(shape):
    cfg = on_engine(SimConfig(**SHAPES[shape]), "trtllm")
    text = serve_command.commands(cfg)
    lines, files = serving_lines(text, "trtllm"), options_files(text)
    assert lines and len(files) == len(lines)
    for args in lines:
        for flag in (a for a in args if a.startswith("--")):
            assert flag in sourced("trtllm"), flag

    def keys(d):
        for k, v in d.items():
            yield k
            if isinstance(v, dict):
                yield from keys(v)
    for options in files:
        for key in keys(options):
            assert key in sourced("trtllm"), key


def test_the_split_and_the_mixture_say_what_their_simulation_did():
    split = serve_command.commands(on_engine(SimConfig(**SHAPES["split"]), "sglang"))
    modes = [a[a.index("--disaggregation-mode") + 1] for a in serving_lines(split, "sglang")]
    assert modes == ["prefill", "decode"] and "--pd-disaggregation" in split
    # the proposer speculates where the pool decodes
    assert ["--speculative-algorithm" in a for a in serving_lines(split, "sglang")] == [False, True]
    mixture = on_engine(SimConfig(**SHAPES["mixture"]), "trtllm")
    (options,) = options_files(serve_command.commands(mixture))
    assert options["enable_attention_dp"] is True
    assert options["speculative_config"] == {"decoding_type": "MTP", "max_draft_len": 1}
    slots = options["moe_config"]["load_balancer"]["num_slots"]
    assert slots == catalog.get_model("deepseek-v3").experts + mixture.redundant_experts and slots % mixture.ep == 0
    # the manifest mounts the same file from a ConfigMap
    docs = list(yaml.safe_load_all(serve_command.manifest(mixture)))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert yaml.safe_load(next(iter(cm["data"].values()))) == options


def test_an_sglang_setting_is_judged_beside_an_sglang_run():
    cfg, result = current(LabInputs(engine="sglang"))
    card = trust(cfg, result.summary)[2]
    runs = validation()["runs"]
    assert run_engine(nearest(catalog.get_gpu("h100"), catalog.get_model("llama-3.1-8b"), 0.1, runs, "sglang")) == "sglang"
    assert "SGLang" in card["help"]


def test_the_band_widens_for_an_engine_no_serving_run_covers():
    assert engine_margin("vllm")[0] == 0 and engine_margin("sglang")[0] == 0
    # TensorRT-LLM's serving runs are checks only: its band moves out by their worst error
    own = [r for r in validation()["runs"] if run_engine(r) == "trtllm"]
    assert own and all(r["set"] == "held out" for r in own)
    worst = max(abs(e) for r in own for e in r["errors"].values())
    assert engine_margin("trtllm")[0] == worst > 0

    def width(engine):
        cfg, result = current(LabInputs(engine=engine))
        lo, hi = (float(x) for x in re.findall(r"[\d.]+", trust(cfg, result.summary)[1]["value"]))
        return hi / lo
    assert width("trtllm") > width("vllm") * (1 + worst) ** 1.5
    w = Workload("llama-3.1-8b", WorkloadSpec(n_requests=100, rate=4), Targets(), Engine(name="trtllm"))
    assert check_config(Deployment("h100"), w).step_scale == pytest.approx(
        Targets().step_scale * (1 + worst), rel=1e-9)


def test_the_planner_searches_the_engines_own_schedule_and_answers_in_its_commands():
    w = Workload("llama-3.1-8b", WorkloadSpec(n_requests=200, rate=6, prompt_mean=512, output_mean=128),
                 Targets(1000, 50), Engine(name="sglang", max_seqs=2048))
    p = plan(w, Budget(max_gpus=2, dtypes=("bf16",)), executor="inline")
    rows = p.rows()
    colocated = {r["policy"] for r in rows if not r["prefill_replicas"]}
    assert colocated <= {"sglang", "serial", "static"} and "sglang" in colocated
    assert {r["policy"] for r in rows if r["prefill_replicas"]} <= {"sarathi"}  # a split's pools chunk
    assert serving_lines(p.row(p.cheapest)["serve"], "sglang")


def test_plan_on_the_command_line_takes_the_engine(capsys):
    main(["plan", "--gpu", "h100", "--model", "llama-3.1-8b", "--rate", "2", "--max-gpus", "1", "--engine", "trtllm",
          "--no-disagg", "--requests", "100"])
    out = capsys.readouterr().out
    assert "trtllm-serve meta-llama/Llama-3.1-8B " in out and "vllm serve" not in out
    assert main(["plan", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "tgi"]) == 2
    assert "--engine: invalid choice: 'tgi'" in capsys.readouterr().err
    assert main(["plan", "--gpu", "h100", "--model", "llama-3.1-8b", "--engine", "sglang", "--max-seqs", "64"]) == 2
    own = ENGINES["sglang"]["max_running_requests"]["value"]
    assert f"SGLang runs its own ({own:,} sequences): drop --max-seqs" in capsys.readouterr().err


def test_a_link_names_the_engine_and_the_lab_runs_it():
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.query_params["engine"] = "SGLang"  # the label reads as the id
    at.run()
    assert not at.exception
    assert at.session_state["engine"] == "sglang" and at.query_params["engine"] == "sglang"
    commands = [c.value for c in at.code if "sglang.launch_server" in c.value]
    assert commands and not [c.value for c in at.code if c.value.startswith("# ") and "vllm serve" in c.value]


def test_a_pinned_deployment_keeps_its_engine_whatever_the_sidebar_says():
    from core.lab import compare
    sglang = LabInputs(engine="sglang", requests=300)
    pinned = compare.from_lab(sglang)
    assert "SGLang" in pinned["label"]
    # compared later under a vLLM sidebar, it still runs as SGLang runs it: the Lab's own SGLang figures
    (row,) = compare.side_by_side([pinned], LabInputs(requests=300))
    assert row["config"] == current_config(sglang)
    lab_pin = compare.normalise(dict(current_config(LabInputs(engine="trtllm")).__dict__), LabInputs())
    assert lab_pin["engine"] == "trtllm"
    with pytest.raises(ValueError, match="deployment engine 'tgi'"):
        compare.normalise(dict(engine="tgi"), LabInputs())


def test_margins_that_compound_past_the_simulators_range_stop_at_its_edge():
    # a GPU family only public runs cover (Blackwell) under an engine no fitted run covers: both margins
    cfg, result = current(LabInputs(engine="trtllm", gpu="b200"))
    band = trust(cfg, result.summary)[0]
    assert "half to twice" in band["help"]
    assert "steps −50%" in band["note"]  # the faster edge, at half the cost model's step
    w = Workload("llama-3.1-8b", WorkloadSpec(n_requests=100, rate=4), Targets(), Engine(name="trtllm"))
    for gpu in (g for g in catalog.gpu_ids() if catalog.get_gpu(g).vendor == "NVIDIA"):
        assert check_config(Deployment(gpu), w).step_scale <= 2.0, gpu


def test_an_sglang_split_chunks_each_pool_and_its_prefill_first_rule_stays_in_one_server(capsys):
    # SGLang's rule orders prompts against decodes in one server; a split's pools each run one kind
    split = on_engine(SimConfig(gpu="h200", model="llama-3.1-70b", tp=2, gpus=12, disagg=True, prefill_gpus=10,
                                prefill_tp=2, decode_tp=2, prefill_gpu="h100"), "sglang")
    assert split.policy == "sarathi" and split.chunk == current_config(LabInputs(engine="sglang", gpu="h200")).chunk
    # five prefill replicas of a 70B feeding one overloaded decode replica: it finishes, in bounded steps
    # (a 16-bit 70B over two H100s leaves SGLang's default share a pool of under one request: a larger one)
    args = ["simulate", "--prefill-gpu", "h100", "--decode-gpu", "h200", "--model", "llama-3.1-70b", "--tp", "2",
            "--gpus", "12", "--rate", "9.6", "--prompt", "4096", "--output", "256", "--disagg", "--prefill-gpus", "10",
            "--prefill-tp", "2", "--decode-tp", "2", "--requests", "300", "--mem-util", "0.88", "--engine", "sglang",
            "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 300
    assert main(args[:-3] + ["--policy", "sglang"]) == 2
    assert "a split's prefill and decode pools each run one kind" in capsys.readouterr().err


def test_a_tensorrt_llm_deployment_that_misses_its_targets_is_offered_only_gpus_the_engine_runs_on():
    # the smallest changes tried every GPU type in the catalog, and an AMD one raised TensorRT-LLM's refusal
    from core.lab.recommend import planner_workload, smallest_changes
    from core.physics import catalog
    inputs = LabInputs(engine="trtllm", prompt_tokens=512, output_tokens=2048, rate=4.0)
    rec = recommend(inputs)
    assert not rec.met and rec.changes  # what would meet the targets, in words
    w = planner_workload(inputs)
    changes = smallest_changes(inputs, w, None)
    assert changes and all(catalog.get_gpu(d.gpu).vendor == "NVIDIA" for _, d in changes)
