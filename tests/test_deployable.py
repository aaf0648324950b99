"""Plans an engineer would deploy (issue 30): headroom at the trust band's slower edge, spare
replicas, prefill and decode pools on two GPU types, and the vllm serve commands that run them."""
import json
import shlex

import pytest
import yaml

from core.cli.main import main
from core.planner.plan import plan
from core.planner.search import outcome
from core.planner.space import Budget, Deployment, Targets, Workload, to_config
from core.serving import serve_command
from core.serving.simulate import simulate
from core.serving.workload import WorkloadSpec

SPEC = WorkloadSpec(n_requests=300, rate=12, prompt_mean=512, output_mean=128, length_dist="lognormal")


def eight_b(headroom=0.2, rate=12.0):
    return Workload("llama-3.1-8b", WorkloadSpec(n_requests=300, rate=rate, prompt_mean=512, output_mean=128,
                                                 length_dist="lognormal"), Targets(1000, 30, headroom=headroom))


def test_a_passing_answer_has_at_least_the_headroom_asked_for_and_more_headroom_never_costs_less():
    costs = []
    for h in (0.0, 0.5, 2.0):
        p = plan(eight_b(h, rate=25), Budget(max_gpus=8, dtypes=("bf16",), disaggregation=False), executor="inline")
        r = p.row(p.cheapest)
        assert r["headroom"] >= h * 0.97  # bisection: within its precision of the rule's edge
        costs.append(r["usd_per_hour"])
    assert costs == sorted(costs) and costs[-1] > costs[0]


def test_the_check_runs_slower_steps_than_the_cost_model():
    w = eight_b()
    assert w.targets.step_scale > 1  # the trust band's slower edge
    d = Deployment("h100", 1, 1)
    fitted = simulate(to_config(d, w)).summary["tpot_ms"]["p99"]
    assert outcome(d, w).tpot_p99_ms > fitted


def test_a_spare_replica_is_one_more_replica_of_each_pool():
    w = eight_b()
    none = plan(w, Budget(max_gpus=8, dtypes=("bf16",)), executor="inline")
    one = plan(w, Budget(max_gpus=8, dtypes=("bf16",), spare_replicas=1), executor="inline")
    a, b = none.cheapest.deployment, one.cheapest.deployment
    assert b.spare == 1 and b.serving().gpus <= b.gpus - b.replica_gpus
    assert b.gpus >= a.gpus + a.replica_gpus - 1e-9 or one.budget.cost(b) > none.budget.cost(a)
    for r in one.passing:  # every answer meets the targets with its spares lost
        d = r.deployment
        assert outcome(d.serving(), w.judged()).meets
        if d.disagg:
            assert d.prefill_replicas >= 2 and d.replicas >= 2


def test_a_split_over_two_gpu_types_moves_its_kv_over_the_network():
    w = Workload("llama-3.1-8b", SPEC)
    same = to_config(Deployment("h100", 1, 1, prefill_tp=1, prefill_replicas=1), w)
    mixed = to_config(Deployment("h200", 1, 1, prefill_tp=1, prefill_replicas=1, prefill_gpu="h100"), w)
    s_same, s_mixed = simulate(same).summary, simulate(mixed).summary
    assert s_mixed["pools"]["prefill"]["gpu"] == "h100" and s_mixed["pools"]["decode"]["gpu"] == "h200"
    # NVLink within a node against the NIC: moving the same KV takes longer across two GPU types
    assert s_mixed["kv_transfer_ms"]["mean"] > 2 * s_same["kv_transfer_ms"]["mean"]


def test_the_planner_searches_splits_over_pairs_of_the_budgets_gpu_types():
    from core.planner.space import shapes
    w = Workload("llama-3.1-8b", SPEC)
    pairs = {(s.pool_gpus) for s in shapes(w, Budget(gpu_types=("h100", "h200"), max_gpus=4)) if s.disagg}
    assert pairs == {("h100", "h100"), ("h100", "h200"), ("h200", "h100"), ("h200", "h200")}


def test_every_row_carries_a_vllm_serve_line_vllm_would_parse():
    p = plan(eight_b(), Budget(max_gpus=4), executor="inline")
    for r in p.rows():
        serve = [line for line in r["serve"].splitlines() if line.startswith("vllm serve ")]
        assert len(serve) == (2 if r["prefill_replicas"] else 1)
        args = shlex.split(serve[0].split("  #")[0])
        assert args[args.index("--tensor-parallel-size") + 1] == str(r["prefill_tp"] if r["prefill_replicas"] else r["tp"])
        assert "--max-num-seqs" in args and "--max-num-batched-tokens" in args and "--max-model-len" in args
        assert ("--quantization" in args) == (r["dtype"] == "fp8")
        if r["prefill_replicas"]:
            conf = json.loads(args[args.index("--kv-transfer-config") + 1])
            assert conf["kv_connector"] == "NixlConnector"
        docs = [d for d in yaml.safe_load_all(r["kubernetes"]) if d["kind"] == "Deployment"]
        assert sum(d["spec"]["replicas"] for d in docs) == r["replicas"] + r["prefill_replicas"]


def test_405b_in_fp8_serves_metas_fp8_checkpoint():
    cfg = to_config(Deployment("h100", 8, 1, "fp8"), Workload("llama-3.1-405b", SPEC))
    line = serve_command.commands(cfg)
    assert "vllm serve meta-llama/Llama-3.1-405B-FP8 " in line and "--quantization" not in line


def test_the_cheapest_stands_beside_the_vendor_recipe():
    w = Workload("llama-3.1-70b", WorkloadSpec(n_requests=200, rate=2, prompt_mean=1024, output_mean=128,
                                               length_dist="lognormal"), Targets(3000, 100))
    p = plan(w, Budget(max_gpus=8), executor="inline")
    rec = p.recipe_json()
    assert rec["shape"].startswith("1×tp4")  # 141 GB of 16-bit weights: tp4 is the first at half of 80 GB
    if not rec["is_cheapest"]:
        assert rec["why"].startswith("The cheapest costs") or "does not meet" in rec["why"]


@pytest.mark.parametrize("args, words", [
    (["plan", "--headroom", "-0.1"], "headroom"),
    (["plan", "--headroom", "11"], "headroom"),
    (["plan", "--spare-replicas", "4", "--max-gpus", "4"], "spare replicas"),
    (["simulate", "--prefill-gpu", "h100"], "--decode-gpu"),
])
def test_bad_plan_inputs_are_one_sentence(args, words, capsys):
    base = ["--model", "llama-3.1-8b", "--rate", "4"] + (["--gpu", "h100", "--executor", "inline"]
                                                        if args[0] == "plan" else [])
    assert main(args + base) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err


def test_plan_and_simulate_default_to_the_same_lengths():
    from core.cli.main import build_parser
    parser = build_parser()
    plan_args = parser.parse_args(["plan", "--model", "m", "--rate", "1"])
    sim_args = parser.parse_args(["simulate", "--model", "m"])
    for k in ("length_dist", "spread", "requests"):
        assert getattr(plan_args, k) == getattr(sim_args, k), k
