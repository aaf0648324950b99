"""The views, driven headless with Streamlit's AppTest: every input, every page, bad input."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    assert not at.exception
    return at


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def stage_heading(at: AppTest) -> str:
    return next(h.value for h in at.subheader if h.value.startswith("Recommended shape"))


# each sidebar input changed once, to a value other than its default
CHANGES = [
    ("number_input", "rate", 8.0), ("select_slider", "prompt", 1024), ("select_slider", "output", 128),
    ("selectbox", "model", "qwen2.5-7b"), ("select_slider", "gpus", 2), ("selectbox", "router", "rr"),
    ("selectbox", "gpu", "h200"),
    ("select_slider", "ttft", 500), ("select_slider", "budget", 4096),
    ("select_slider", "sys_prompts", 10), ("select_slider", "sys_tokens", 2048), ("select_slider", "turns", 3),
    ("select_slider", "turn_gap", 10), ("selectbox", "router", "prefix"), ("select_slider", "offload", 128),
    ("select_slider", "offload", 0), ("selectbox", "router", "lor"), ("selectbox", "spec", "eagle"),
    ("select_slider", "spec_k", 3),
    ("select_slider", "spec_a", 0.9), ("toggle", "prefix_cache", False), ("toggle", "chunked", False),
    ("toggle", "cb", False), ("toggle", "tp_on", True), ("select_slider", "max_seqs", 64),
    ("select_slider", "block", 32), ("selectbox", "dist", "sharegpt"), ("select_slider", "tpot", 50),
    ("select_slider", "requests", 1000), ("number_input", "seed", 3), ("selectbox", "dtype", "fp8"),
    ("selectbox", "pp", 2),
]


def view(at: AppTest) -> tuple:
    """What a person reads on the page: headings, text, captions, metrics with their deltas, the diagram
    and the gauges."""
    return (tuple(h.value for h in at.subheader), tuple(m.value for m in at.markdown),
            tuple(c.value for c in at.caption), tuple((m.label, m.value, m.delta) for m in at.metric),
            tuple(e.value for e in at.error), tuple(h.value for h in at.html))


def test_every_input_changes_the_view_without_an_exception():
    at = app()
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    before = view(at)
    for kind, key, value in CHANGES:
        getattr(at.sidebar, kind)(key=key).set_value(value)
        at.run()
        assert not at.exception, (key, at.exception)
        now = view(at)
        assert now != before, f"changing {key} changed nothing on the page"
        before = now


def test_metrics_follow_the_request_rate():
    at = app()
    low = metric(at, "Throughput")
    at.sidebar.number_input(key="rate").set_value(12.0).run()
    assert not at.exception
    high = metric(at, "Throughput")
    assert float(high.split()[0].replace(",", "")) > 2 * float(low.split()[0].replace(",", ""))


def test_the_stage_moves_up_when_the_model_stops_fitting_one_gpu():
    at = app()
    small = stage_heading(at)
    at.sidebar.selectbox(key="model").set_value("llama-3.1-70b")
    at.sidebar.select_slider(key="gpus").set_value(4)
    at.run()
    assert not at.exception
    big = stage_heading(at)
    stage = lambda h: int(h.split("stage ")[1][0])  # noqa: E731
    assert stage(big) >= 4 > stage(small)
    # the sharding toggle is off, but no single GPU holds the model: the page shards it and says so
    assert not at.error and any("toggle is off" in i.value for i in at.info)
    at.sidebar.toggle(key="tp_on").set_value(True).run()
    assert not at.exception and not at.error and not any("toggle is off" in i.value for i in at.info)


@pytest.mark.parametrize("change,words", [
    ({"rate": 0.0}, "above 0 req/s"),
    ({"model": "llama-2-7b", "prompt": 8192}, "context"),
    ({"model": "deepseek-v3"}, "does not fit"),
])
def test_bad_input_gives_a_message_and_the_page_keeps_working(change, words):
    at = app()
    widgets = {"rate": at.sidebar.number_input, "prompt": at.sidebar.select_slider, "model": at.sidebar.selectbox}
    for key, value in change.items():
        widgets[key](key=key).set_value(value)
    at.run()
    assert not at.exception
    assert any(words in e.value for e in at.error), [e.value for e in at.error]
    at.sidebar.number_input(key="rate").set_value(2.0)
    at.sidebar.selectbox(key="model").set_value("llama-3.1-8b")
    at.sidebar.select_slider(key="prompt").set_value(512)
    at.run()
    assert not at.exception and not at.error


def test_walkthrough_steps_through_the_five_stages():
    at = app()
    at.switch_page("views/walkthrough.py").run()
    assert not at.exception
    seen = []
    for _ in range(5):
        seen.append(next(h.value for h in at.header if h.value.startswith("Stage")))
        nxt = next(b for b in at.button if b.label == "Next")
        if nxt.disabled:
            break
        nxt.click().run()
        assert not at.exception
    assert [s.split(":")[0] for s in seen] == [f"Stage {i}" for i in range(1, 6)]
    next(b for b in at.button if b.label == "Back").click().run()
    assert next(h.value for h in at.header if h.value.startswith("Stage")).startswith("Stage 4")


def test_scenario_cards_load_their_inputs_into_the_lab():
    at = app()
    at.switch_page("views/scenarios.py").run()
    assert not at.exception
    assert len([b for b in at.button if b.label == "Load into the Lab"]) >= 5
    next(b for b in at.button if b.key == "load_bigmodel").click().run()
    assert not at.exception
    assert at.session_state["model"] == "llama-3.1-70b" and at.session_state["gpus"] == 4
    assert "stage 4" in stage_heading(at)


def test_bottlenecks_and_tradeoffs_pages_render():
    at = app()
    for page, heading in (("views/bottlenecks.py", "Bottlenecks"), ("views/tradeoffs.py", "Decision trade-offs")):
        at.switch_page(page).run()
        assert not at.exception, page
        assert at.title[0].value == heading
    assert len(at.table) >= 5  # one A/B table per trade-off that can run here


def test_the_scenario_path_never_goes_back_a_stage():
    from core.lab import content
    from core.lab.stages import evaluate_stages, simplest_stage
    stages = []
    for card in content.scenarios():
        inputs = content.scenario_inputs(card)
        rec = simplest_stage(evaluate_stages(inputs, stop_when_met=True), inputs)
        assert rec.met, card["id"]
        stages.append(rec.stage)
    assert stages == sorted(stages)
    assert stages[0] == 1 and stages[-1] == 5 and len(set(stages)) == 5  # the path walks all five


def test_the_planner_searches_and_shows_the_cheapest_deployment_and_frontier():
    at = app()
    at.sidebar.number_input(key="rate").set_value(44.0).run()
    at.switch_page("views/planner.py").run()
    assert not at.exception and at.title[0].value == "Planner"
    assert any("Search deployments" in i.value for i in at.info)  # nothing runs until asked
    at.select_slider[0].set_value(4)  # most GPUs
    at.multiselect[1].set_value(["bf16"])
    next(b for b in at.button if b.label == "Search deployments").click().run()
    assert not at.exception
    heading = next(h.value for h in at.subheader if h.value.startswith("Cheapest"))
    assert heading.startswith("Cheapest: 2 H100: 2×tp1, bf16")  # one H100 cannot carry 44 req/s
    counts = next(c.value for c in at.caption if "deployments in" in c.value)
    assert "simulations at 44 req/s" in counts and "ruled out by the roofline" in counts
    # cost against p99 TTFT and p99 TPOT, and the best deployments' throughput against interactivity
    assert len(at.get("vega_lite_chart")) == 3 and len(at.dataframe) >= 1
    assert {b.label for b in at.get("download_button")} >= {"Download CSV", "Download JSON", "Concurrency sweep (CSV)",
                                                           "Concurrency sweep (JSON)"}
    at.sidebar.number_input(key="rate").set_value(40.0).run()  # the sidebar moved: the answer is marked stale
    assert any("press **Search deployments**" in w.value for w in at.warning)


def test_a_replayed_trace_replaces_the_sweeps_it_makes_meaningless():
    from core.lab import sweeps
    from core.lab.inputs import LabInputs
    trace = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.2},512,128\n" for i in range(50))
    x = LabInputs(trace_csv=trace)
    assert "replay the same requests" in sweeps.trace_fixes(x, "rate")
    assert sweeps.trace_fixes(x, "tp") is None and sweeps.trace_fixes(LabInputs(), "rate") is None


def test_planner_searches_at_the_sidebars_own_price():
    """A price set in the sidebar (Advanced) is the Planner's price for that GPU, not an error."""
    at = app()
    at.sidebar.number_input(key="price").set_value(1.5).run()
    at.switch_page("views/planner.py").run()
    assert not at.exception, at.exception
    assert at.multiselect[0].value == ["h100"]
    at.select_slider[0].set_value(1)
    at.multiselect[1].set_value(["bf16"])
    next(b for b in at.button if b.label == "Search deployments").click().run()
    assert not at.exception
    cost = next(m for m in at.metric if m.label == "Cost")
    assert cost.value == "$1.50 / h"  # one H100 at the sidebar's price


def test_an_overloaded_walkthrough_and_lab_mark_latencies_as_growing_in_full_view():
    # '52.4 min and growing' was cut off to '52.4 min a...' on a stage card: the figure stays whole
    # and the words go under it, on the walkthrough's cards and on the Lab's
    at = app()
    at.sidebar.number_input(key="rate").set_value(44.0)
    at.sidebar.select_slider(key="output").set_value(256).run()
    cards = {m.label: m for m in at.metric}
    assert cards["p99 TTFT"].value.endswith(" s") and cards["p99 TTFT"].delta.startswith("and growing")
    assert "and growing" not in cards["Throughput"].value + (cards["Throughput"].delta or "")
    at.switch_page("views/walkthrough.py").run()
    assert not at.exception
    stage1 = {m.label: m for m in at.metric}
    assert "growing" not in stage1["p99 TTFT"].value and stage1["p99 TTFT"].delta.startswith("and growing")
    assert any("the queue grows without bound: " in e.value and "req/s served" in e.value for e in at.error)


def test_each_trade_off_section_opens_with_the_gpus_it_ran_on():
    # the note sat in the right-hand column, after gains, costs and sources on a phone
    from core.lab import content
    at = app()
    at.switch_page("views/tradeoffs.py").run()
    assert not at.exception
    texts = [m.value for m in at.markdown]
    for t in content.tradeoffs():
        gains = next(i for i, v in enumerate(texts) if t["gains"] in v)
        assert "run" in texts[gains - 1] and "GPU" in texts[gains - 1], (t["id"], texts[gains - 1])
    tp = next(t for t in content.tradeoffs() if t["id"] == "tensor_parallel")
    note = texts[next(i for i, v in enumerate(texts) if tp["gains"] in v) - 1]
    assert "The sidebar's 1 GPU cannot compare tensor parallelism, so both sides run on 2 H100 GPUs" in note


def test_a_replica_larger_than_a_node_is_pipelined_across_nodes_and_the_lab_says_so():
    at = app()
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    at.sidebar.selectbox(key="model").set_value("llama-3.1-405b")
    at.sidebar.select_slider(key="gpus").set_value(16)
    at.sidebar.toggle(key="tp_on").set_value(True)
    at.sidebar.select_slider(key="requests").set_value(200)
    at.run()
    assert not at.exception
    assert any("pipeline parallel across" in i.value for i in at.info)
    assert any("tp=8 x pp=2 on 16 H100" in c.value for c in at.caption)


def test_an_advanced_knob_keeps_its_value_while_its_section_is_closed():
    # closed, the section's knobs are not drawn (they cost the browser time on every page): their values stay
    simulated = lambda at: next(c.value for c in at.caption if c.value.startswith("Simulated:"))  # noqa: E731
    at = app()
    assert all(s.key != "requests" for s in at.sidebar.select_slider)  # closed: not drawn
    at.session_state["advanced"] = True
    at.run()
    at.sidebar.select_slider(key="requests").set_value(500).run()
    assert "500 requests" in simulated(at)
    at.session_state["advanced"] = False
    at.run()
    assert all(s.key != "requests" for s in at.sidebar.select_slider)  # not drawn
    at.sidebar.number_input(key="rate").set_value(3.0).run()  # another input moves: the closed knob still counts
    assert not at.exception and "500 requests" in simulated(at) and at.query_params["requests"] == "500"
    at.session_state["advanced"] = True
    at.run()
    assert at.sidebar.select_slider(key="requests").value == 500


def test_a_gpu_entered_by_its_datasheet_becomes_the_labs_gpu():
    at = app()
    assert all(i.key != "ds_name" for i in at.sidebar.text_input)  # the form is drawn only while open
    at.session_state["datasheet_open"] = True
    at.run()
    at.sidebar.text_input(key="ds_name").input("Lab test GPU")
    at.sidebar.number_input(key="ds_memory_gib").set_value(48.0)
    next(b for b in at.sidebar.button if b.label == "Add this GPU").click().run()
    assert not at.exception and not at.sidebar.error
    gpu = at.sidebar.selectbox(key="gpu")
    assert "Lab test GPU" in gpu.options[gpu.index]  # chosen, and the Lab simulated on it:
    assert "48 GiB" in gpu.options[gpu.index] and any(m.value for m in at.main.metric)


def test_a_link_with_speculative_decoding_shows_what_it_gained():
    from core.physics import speculative
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.query_params["spec"], at.query_params["spec_a"], at.query_params["rate"] = "eagle", "0.8", "1"
    at.run()
    assert not at.exception
    simulated = next(c.value for c in at.caption if c.value.startswith("Simulated:"))
    k = speculative.method_defaults("eagle")["spec_tokens"]
    assert f"speculative decoding (EAGLE head, {k} draft tokens" in simulated
    # 0.8 for each of k drafts: 1 + 0.8 + 0.8^2 + ... tokens a step; the accepted share of the drafts follows
    tokens = speculative.expected_tokens(0.8, k)
    assert float(metric(at, "Tokens per step").split()[0]) == pytest.approx(tokens, abs=0.03)
    assert float(metric(at, "Draft acceptance rate").rstrip("%")) == pytest.approx(100 * (tokens - 1) / k, abs=1.5)
    assert at.query_params["spec"] == "eagle" and at.query_params["spec_a"] == "0.8"


def test_a_link_with_a_host_kv_tier_and_prefix_routing_shows_what_the_tier_kept():
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    for k, v in dict(turns="6", turn_gap="60", offload="128", router="prefix", gpu="l40s", gpus="2", rate="12",
                     prompt="256", output="256").items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error
    simulated = next(c.value for c in at.caption if c.value.startswith("Simulated:"))
    assert "128 GiB host KV tier" in simulated and "prefix-aware routing" in simulated
    found = metric(at, "Found in host memory")
    assert found.endswith(" tokens") and found.split()[0] != "0"
    assert metric(at, "Moved over the host link").endswith(" GB")
    assert at.query_params["offload"] == "128" and at.query_params["router"] == "prefix"
    # prefix caching off: the tier has nothing to keep, said in one sentence instead of figures
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    at.sidebar.toggle(key="prefix_cache").set_value(False).run()
    assert not at.exception and any("turn continuous batching and prefix caching on" in e.value for e in at.error)
