"""Past one machine: the planner's searches on a real (local) Ray cluster give the answers the
local process pool gives."""
import ray

from core.lab.inputs import LabInputs
from core.lab.recommend import planner_workload
from core.planner.plan import plan
from core.planner.space import Budget


def test_ray_finds_the_frontier_the_local_pool_finds():
    w = planner_workload(LabInputs(rate=20, prompt_tokens=1024, output_tokens=128))
    budget = Budget(max_gpus=4)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        on_ray = plan(w, budget, executor="ray")
    finally:
        ray.shutdown()
    local = plan(w, budget, executor="local", workers=2)
    assert on_ray.frontier
    assert [on_ray.row(r) for r in on_ray.frontier] == [local.row(r) for r in local.frontier]
    assert on_ray.row(on_ray.cheapest) == local.row(local.cheapest)
