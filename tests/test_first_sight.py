"""What a new user sees first on the Lab, in core terms (issue 26): the recommendation looks where
real deployments look (fp8 weights), says when a simpler stage wins only on a tie, agrees with the
deployment the sidebar simulates on the default page, and a model too large for the sidebar's GPUs
is sharded or given a shape the sidebar can set. The browser's view of the same is in
tests/test_browser_first_sight.py."""
from dataclasses import replace

import pytest

from core.lab import content
from core.lab.inputs import LabInputs, NeedsShape, current_config, sharding_note
from core.lab.recommend import recommend
from core.lab.report import lab_view
from core.physics import catalog
from core.physics.memory import weight_bytes_per_gpu


def test_405b_on_16_h100_is_recommended_on_8_in_fp8_as_deployments_serve_it():
    x = LabInputs(model="llama-3.1-405b", gpu="h100", gpus=16, tensor_parallel=True)
    rec = recommend(x)
    assert rec.met and rec.deployment.dtype == "fp8" and rec.deployment.gpus == 8
    # physics: 405B weights in fp8 fit eight 80 GB GPUs, in bf16 they do not
    model, gpu = catalog.get_model(x.model), catalog.get_gpu("h100")
    assert weight_bytes_per_gpu(model, 8, "fp8") < gpu.memory_gib * 2**30 < weight_bytes_per_gpu(model, 8, "bf16")
    assert "set Weights to fp8" in rec.reason


def test_a_model_that_ships_in_fp8_is_offered_in_fp8_when_nothing_fits_in_bf16():
    rec = recommend(LabInputs(model="deepseek-v3", gpus=8))
    assert not rec.met
    assert "bf16 or fp8" in rec.reason and any("fp8" in c for c in rec.changes)


def test_one_request_at_a_time_says_continuous_batching_costs_nothing_more():
    card = next(c for c in content.scenarios() if c["id"] == "prototype")
    rec = recommend(content.scenario_inputs(card))
    assert rec.met and rec.stage == 1
    assert "costs nothing more on the same GPUs" in rec.reason


def test_the_default_page_recommends_the_deployment_it_simulates():
    x = LabInputs()
    view = lab_view(x)
    d, cfg = view["recommendation"].deployment, view["config"]
    assert (d.gpus, d.tp, d.dtype, d.policy, d.chunk) == (cfg.gpus, cfg.tp, cfg.dtype, cfg.policy,
                                                          cfg.max_batched_tokens)
    assert view["differs"] is None and view["current_path"] is None  # one deployment, one path


def test_a_model_no_gpu_holds_is_sharded_with_the_toggle_off_and_says_so():
    x = LabInputs(model="llama-3.1-70b", gpu="h100", gpus=8)
    cfg = current_config(x)
    assert cfg.tp * cfg.pp >= 2 and cfg.gpus == 8
    assert "toggle is off" in sharding_note(x, cfg)
    assert sharding_note(replace(x, model="llama-3.1-8b"), current_config(replace(x, model="llama-3.1-8b"))) is None


@pytest.mark.parametrize("model,gpus,replica", [("deepseek-v3", 8, 32), ("llama-3.1-405b", 4, 16)])
def test_a_replica_beyond_the_sidebars_gpus_names_a_settable_shape_that_runs(model, gpus, replica):
    x = LabInputs(model=model, gpus=gpus, tensor_parallel=True)
    with pytest.raises(NeedsShape) as e:
        current_config(x)
    assert f"tp >= {replica}" not in str(e.value) and "pp=" in str(e.value)
    fixed = current_config(replace(x, **e.value.settings))  # what the button sets
    assert fixed.tp * fixed.pp == replica and fixed.tp <= catalog.get_gpu(x.gpu).gpus_per_node
