"""The Lab and the command line give the same answer for the same deployment (issue 26, point 5):
every run's JSON carries the `python -m core simulate ...` line that reproduces its figures, and
the command line's defaults are the Lab's, so that a command with only the deployment's shape
already gives the Lab's numbers."""
import json
import shlex
from dataclasses import fields, replace

import pytest

from core.cli.main import main, simulation_of
from core.lab.inputs import LabInputs, current_config, run, stage_config
from core.serving import export
from core.serving.command import DEFAULTS, simulate_command
from core.serving.simulate import SimConfig

# the issue's deployment: Llama-3.1-70B on 8 H100s with sharding on (2 x tp4), 10 req/s, 2048/256
SEVENTY_B = LabInputs(model="llama-3.1-70b", gpu="h100", gpus=8, tensor_parallel=True, rate=10,
                      prompt_tokens=2048, output_tokens=256)

CASES = {
    "defaults": lambda: current_config(LabInputs()),
    "70b on 8 h100, 10 req/s": lambda: current_config(SEVENTY_B),
    "closed loop of 32 users": lambda: current_config(LabInputs(load="users", users=32)),
    "system prompts and turns": lambda: current_config(LabInputs(system_prompts=10, system_prompt_tokens=1024,
                                                                 turns=4, turn_gap_s=20, prompt_tokens=200,
                                                                 output_tokens=150)),
    "disaggregation, 70b on 16": lambda: stage_config(replace(SEVENTY_B, gpus=16, rate=20), 5),
    "70b on sglang": lambda: current_config(replace(SEVENTY_B, engine="sglang")),
    "deepseek-v3 with dp attention on trtllm": lambda: current_config(LabInputs(
        engine="trtllm", model="deepseek-v3", gpu="h200", gpus=8, dtype="fp8", tensor_parallel=True, experts="ep_dp",
        requests=300)),
    "static batches on sglang": lambda: stage_config(LabInputs(engine="sglang"), 2),
    "a split on sglang": lambda: stage_config(replace(SEVENTY_B, gpus=16, rate=20, engine="sglang"), 5),
}


def argv(command: str) -> list[str]:
    """The command's arguments, as a shell reads them (a trailing # note is a comment)."""
    words = shlex.split(command, comments=True)
    assert words[:4] == ["python", "-m", "core", "simulate"], command
    return words[3:]


def cli_config(command: str):
    return simulation_of(command)


def cli_summary(command: str, capsys) -> dict:
    capsys.readouterr()
    assert main(argv(command) + ["--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def comparable(cfg):
    """Under chunked prefill no --chunk means a chunk of the token budget, as the Lab sets it."""
    if cfg.policy == "sarathi" and cfg.chunk is None:
        cfg = replace(cfg, chunk=cfg.max_batched_tokens)
    return cfg


def figures(s: dict) -> tuple:
    return s["ttft_ms"]["p99"], s["tpot_ms"]["p99"], s["throughput_tok_s"], s["goodput_req_s"], s["requests"]


@pytest.mark.parametrize("case", list(CASES))
def test_the_command_a_lab_run_carries_gives_the_lab_s_figures(case, capsys):
    cfg = CASES[case]()
    lab = run(cfg)
    command = export.run_dict(lab)["reproduce"]
    assert command == simulate_command(cfg) and "#" not in command  # exact: nothing left to say
    # the same configuration, field by field, bar the page's tighter guard on engine steps
    assert comparable(replace(cli_config(command), max_steps=cfg.max_steps)) == cfg, command
    assert figures(cli_summary(command, capsys)) == figures(lab.summary), command


def test_the_issue_s_deployment_gives_the_lab_s_p99_ttft_from_its_shape_alone(capsys):
    cfg = current_config(SEVENTY_B)
    lab = run(cfg).summary
    shape = (f"python -m core simulate --gpu h100 --model llama-3.1-70b --tp {cfg.tp} --gpus 8 --rate 10 "
             f"--prompt 2048 --output 256")
    assert figures(cli_summary(shape, capsys)) == figures(lab)
    # and so the pass/fail against a 2 s target is the same on both sides
    assert simulate_command(cfg) == shape


def test_the_command_line_s_defaults_are_the_lab_s():
    lab, cfg = LabInputs(), current_config(LabInputs())
    cli = cli_config("python -m core simulate --gpu h100 --model llama-3.1-8b")
    assert (cli.policy, DEFAULTS["policy"]) == ("sarathi", "sarathi") and lab.chunked_prefill
    assert cli.max_batched_tokens == lab.max_batched_tokens == 2048
    assert (cli.workload.length_dist, cli.workload.spread) == (lab.length_dist, lab.spread) == ("lognormal", 0.5)
    assert cli.router == lab.router == "lor"
    assert cli.workload.n_requests == lab.requests == 2000
    assert cli.max_model_len == cfg.max_model_len  # fitted as the Lab fits it, not the engine's bare default
    for name in ("block_size", "max_seqs", "ttft_slo_ms", "tpot_slo_ms", "prefix_caching", "mem_util", "kv_dtype",
                 "dtype"):
        assert getattr(cli, name) == getattr(cfg, name), name


def test_a_replayed_trace_rides_in_the_json_and_its_command_replays_it(tmp_path, monkeypatch, capsys):
    rows = "\n".join(f"{0.25 * i:.2f},{300 + 37 * (i % 11)},{40 + 13 * (i % 7)}" for i in range(120))
    cfg = current_config(LabInputs(trace_csv="arrival_s,prompt_tokens,output_tokens\n" + rows + "\n"))
    result = run(cfg)
    data = json.loads(export.to_json(export.run_dict(result)))
    command = data["reproduce"]
    assert "--trace trace.csv" in command and "deployment.trace_csv" in command.split("#", 1)[1]
    (tmp_path / "trace.csv").write_text(data["deployment"]["trace_csv"])
    monkeypatch.chdir(tmp_path)
    assert figures(cli_summary(command, capsys)) == figures(result.summary)


def test_a_closed_loop_s_command_names_its_users_and_no_rate():
    words = argv(simulate_command(current_config(LabInputs(load="users", users=32, think_s=2.0))))
    assert words[words.index("--concurrency") + 1] == "32" and words[words.index("--think-time") + 1] == "2"
    assert "--rate" not in words


def test_a_gpu_at_your_price_is_exact_and_a_model_of_your_own_says_what_is_missing(capsys):
    from pathlib import Path

    from core.physics import catalog, hfconfig
    cfg = replace(current_config(LabInputs(requests=200)), gpu="h100@1.85")
    command = simulate_command(cfg)
    assert "--gpu h100@1.85" in command and "#" not in command
    assert cli_summary(command, capsys)["cost_per_1m_tokens_usd"] == run(cfg).summary["cost_per_1m_tokens_usd"]
    path = Path(__file__).parent / "fixtures" / "configs" / "llama-2-7b.json"
    model = catalog.register_model(hfconfig.parse(path.read_bytes(), path.name).model)
    note = simulate_command(replace(cfg, model=model.id)).split("#", 1)[1]
    assert "--model-config" in note and "this machine" in note


@pytest.mark.parametrize("flag,value,words", [("--watermark", "0.6", "KV admission watermark"),
                                              ("--scale-down-frac", "1", "scale-down share"),
                                              ("--watermark", "nan", "nan")])
def test_the_new_flags_refuse_bad_values_in_one_line(flag, value, words, capsys):
    assert main(["simulate", "--gpu", "h100", "--model", "llama-3.1-8b", flag, value]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


def test_every_field_a_page_sets_has_a_flag():
    """A field of SimConfig the command cannot carry would make the JSON's command wrong without a
    word: each one that changes a figure is written, each that cannot is named here with why."""
    silent = {"max_steps", "fast_forward", "trace_cap", "stream_samples", "stream_cap",  # no figure depends on them
              "workload", "trace_csv"}  # written field by field / as --trace
    base = current_config(LabInputs(requests=200))
    changed = dict(pp=2, dtype="fp8", kv_dtype="fp8", policy="vllm", block_size=32, max_seqs=128,
                   max_batched_tokens=4096, chunk=1024, max_model_len=8192, mem_util=0.8, watermark=0.05,
                   prefix_caching=False, router="kv", disagg=True, prefill_gpus=2, prefill_tp=2, decode_tp=1,
                   autoscale=True, min_replicas=2, scale_metric="kv", scale_target=0.5, scale_down_frac=0.5,
                   scale_interval_s=10.0, startup_fixed_s=60.0, load_gbps=2.0, ttft_slo_ms=500.0, tpot_slo_ms=50.0,
                   attn_kernel="sdpa", launch="eager", engine_overhead="bare", async_scheduling=False,
                   api_server=False, gpus=8, tp=2, gpu="h200", model="llama-3.1-70b", prefill_gpu="h200",
                   step_scale=1.1, spec_method="eagle", kv_offload_gb=64.0, kv_offload_gbps=12.5, ep=2,
                   dp_attention=True, ep_load_cv=0.5, eplb=True, redundant_experts=32, micro_batch_overlap=True,
                   no_evict=True)
    # speculative decoding's counts and draft model come with a method
    speculating = dict(spec_method="draft", spec_tokens=3, spec_acceptance=(0.9, 0.8, 0.5), draft_model="llama-3.2-1b")
    assert set(changed) | set(speculating) | silent == {f.name for f in fields(base)}
    for name, value in changed.items():
        one = replace(base, **{name: value})
        assert getattr(cli_config(simulate_command(one)), name) == value, name
    back = cli_config(simulate_command(replace(base, **speculating)))
    assert {name: getattr(back, name) for name in speculating} == speculating
    spec = replace(base.workload, n_requests=300, rate=7.5, prompt_mean=700, output_mean=90, length_dist="uniform",
                   spread=0.25, arrival="gamma", cv=2.5, seed=7, prefix_groups=3, prefix_tokens=512, turns=3,
                   turn_gap_s=12.5, concurrency=16, think_s=1.5, think_dist="exponential",
                   rate_schedule=((0.0, 2.0), (60.0, 9.5)))
    assert cli_config(simulate_command(replace(base, workload=spec))).workload == replace(
        spec, max_total_tokens=base.workload.max_total_tokens)


def test_the_lab_page_shows_the_command_of_what_it_simulated():
    from test_pages import app
    at = app()
    expander = next(e for e in at.expander if e.label == "Reproduce on the command line")
    shown = expander.code[0].value
    assert shown == simulate_command(current_config(LabInputs())) and shown.startswith("python -m core simulate ")


def test_weights_other_than_the_release_are_in_the_command_and_the_release_goes_unsaid():
    # no --dtype replays a model as released (gpt-oss's MXFP4 experts): a 16-bit gpt-oss must say bf16
    for dtype, said in (("bf16", True), ("mxfp4", False)):
        cfg = SimConfig(gpu="h100", model="gpt-oss-120b", tp=2, dtype=dtype)
        command = simulate_command(cfg)
        assert ("--dtype" in command) == said
        assert cli_config(command).dtype == dtype
