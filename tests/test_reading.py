"""How the pages read: scenario cards load whole workloads, the trace's caption, metric cards in
reading order, charts whose axes a person can read, the component diagram, the app's settings."""
import math
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.lab import content, sweeps
from core.lab.inputs import LabInputs
from ui import charts, widgets

ROOT = Path(__file__).resolve().parent.parent


def app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    assert not at.exception
    return at


# ---------------------------------------------------------------- scenario cards

def test_a_scenario_card_loads_its_whole_workload_so_its_badge_and_the_lab_agree():
    at = app()
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    # inputs the card leaves unset, moved away from their defaults first
    at.sidebar.select_slider(key="max_seqs").set_value(4)
    at.sidebar.select_slider(key="requests").set_value(500)
    at.sidebar.selectbox(key="dist").set_value("sharegpt")
    at.sidebar.selectbox(key="dtype").set_value("fp8")
    at.run()
    at.switch_page("views/scenarios.py").run()
    card = next(c for c in content.scenarios() if c["id"] == "launch")
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    badge = badges[[c["id"] for c in content.scenarios()].index("launch")]
    next(b for b in at.button if b.key == "load_launch").click().run()
    assert not at.exception
    defaults = LabInputs()
    assert at.session_state["max_seqs"] == defaults.max_seqs and at.session_state["requests"] == defaults.requests
    assert at.session_state["dist"] == defaults.length_dist and at.session_state["dtype"] == defaults.dtype
    assert at.session_state["rate"] == card["inputs"]["rate"]
    stage = badge.split("[Stage ")[1].split(":")[0]
    heading = next(h.value for h in at.subheader if h.value.startswith("Recommended shape"))
    assert f"stage {stage}" in heading


# ---------------------------------------------------------------- traces

def test_the_trace_caption_names_every_input_the_trace_replaces():
    trace = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.5},{300 + i},{100}\n" for i in range(40))
    text = sweeps.trace_replaces(trace)
    for words in ("40 requests", "request rate", "average prompt and output tokens", "length distribution",
                  "number of simulated requests", "seed", "still apply"):
        assert words in text, words
    with pytest.raises(ValueError, match="header"):
        sweeps.trace_replaces("a,b\n1,2\n")


def test_a_trace_replaces_the_rate_and_output_sweeps_with_a_sentence():
    trace = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.2},512,128\n" for i in range(50))
    x = LabInputs(trace_csv=trace)
    assert "replay the same requests" in sweeps.trace_fixes(x, "rate")
    assert "replay the same requests" in sweeps.trace_fixes(x, "output")


# ---------------------------------------------------------------- the Lab's cards and words

def test_the_labs_metric_cards_keep_their_reading_order_when_stacked():
    # a phone stacks the columns: the cards must come in the page's order row by row, not column by column
    at = app()
    labels = [m.label for m in at.metric]
    assert labels[:8] == ["p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT", "Throughput", "Goodput",
                          "GPUs / replicas", "Cost per 1M output tokens"]
    gauges = sum(h.value.count('class="gauge ') for h in at.html)
    assert gauges == 5
    assert any("sliders in the sidebar" in m.value for m in at.markdown)
    assert not any("on the left" in m.value for m in at.markdown)


def test_the_throughput_card_says_its_share_of_capacity():
    at = app()
    card = next(m for m in at.metric if m.label == "Throughput")
    assert "of" in card.delta and "capacity" in card.delta


# ---------------------------------------------------------------- charts

def spec(chart) -> dict:
    return chart.to_dict()


def layers(d: dict) -> list[dict]:
    return d.get("layer", [d])


def encodings(d: dict, channel: str) -> list[dict]:
    return [lay["encoding"][channel] for lay in layers(d) if channel in lay.get("encoding", {})]


def texts(d: dict) -> list[str]:
    """The text marks' strings (Altair moves inline data to the spec's datasets)."""
    rows = [v for values in d.get("datasets", {}).values() for v in values]
    rows += [v for lay in layers(d) for v in lay.get("data", {}).get("values", [])]
    return [v["text"] for v in rows if "text" in v]


def is_125(v: float) -> bool:
    m = v / 10 ** math.floor(math.log10(v) + 1e-9)
    return any(abs(m - k) < 1e-6 for k in (1, 2, 5))


@pytest.mark.parametrize("lo, hi", [(3, 700), (0.05, 12), (12, 18), (0.3, 40000), (90, 110)])
def test_log_ticks_fall_on_1_2_5_steps_and_span_the_data(lo, hi):
    t = charts.ticks_125(lo, hi)
    assert all(is_125(v) for v in t) and t == sorted(t)
    scale, axis = charts.log_scale([lo, hi])
    assert scale.domain[0] <= lo and scale.domain[1] >= hi
    assert axis["values"] and 2 <= len(axis["values"]) <= 9


def test_a_log_axis_on_a_sweep_ticks_at_1_2_5():
    rows = [dict(rate=r, ttft=t) for r, t in ((0.7, 40), (1.5, 60), (3.1, 90), (6.3, 300), (12.7, 4000))]
    d = spec(charts.line(rows, "rate", "ttft", "rate", "ttft", "t", log_x=True, log_y=True, rule_y=1000))
    for channel in ("x", "y"):
        values = encodings(d, channel)[0]["axis"]["values"]
        assert all(is_125(v) for v in values), (channel, values)


def test_a_limit_far_above_the_data_is_named_not_drawn():
    # a running batch of a few sequences against 256 slots: drawn, the limit would flatten the line
    rows = [dict(rate=r, batch=b) for r, b in ((1, 0.5), (2, 1.2), (4, 2.5), (8, 5.0), (16, 9.8))]
    d = spec(charts.line(rows, "rate", "batch", "rate", "batch", "t", log_x=True, rule_y=256,
                         rule_y_label="256 slots per replica"))
    y = encodings(d, "y")[0]
    assert y["scale"]["domain"][1] < 20
    assert not any(lay.get("encoding", {}).get("y", {}).get("field") == "v" for lay in layers(d))  # no line
    assert any("256" in t and "slots per replica" in t for t in texts(d))
    # near the data, the limit is a line
    near = spec(charts.line(rows, "rate", "batch", "rate", "batch", "t", log_x=True, rule_y=16))
    assert any(lay.get("encoding", {}).get("y", {}).get("field") == "v" for lay in layers(near))


def test_counts_tick_at_whole_numbers():
    from core.lab.inputs import current
    res = current(LabInputs(rate=0.5, requests=200))[1]
    for chart in (charts.queue_and_batch(res), charts.kv_blocks(res)):
        y = encodings(spec(chart), "y")[0]
        assert y["axis"]["tickMinStep"] == 1 and y["axis"]["format"] in ("d", ",d")


def test_the_kv_chart_spans_the_blocks_used_not_the_capacity_when_far_below_it():
    from core.lab.inputs import current
    res = current(LabInputs(rate=0.5, requests=200))[1]
    cap = res.summary["kv_blocks_total"]
    assert res.summary["peak_kv_blocks_used"] * 2.5 < cap
    d = spec(charts.kv_blocks(res))
    assert encodings(d, "y")[0]["scale"]["domain"][1] < cap / 2
    assert any(f"{cap:,}" in t and "above the chart" in t for t in texts(d))


# ---------------------------------------------------------------- the component diagram

def test_the_component_diagram_is_a_list_in_path_order_with_readable_text():
    from core.lab.stages import architecture_path
    path = architecture_path(3, 1)
    html = widgets.diagram_html(path)
    names = [c["name"] for c in path]
    positions = [html.index(f"{i}. {n}") for i, n in enumerate(names, 1)]
    assert positions == sorted(positions)
    sizes = [int(s.split("px")[0]) for s in html.split("font-size:")[1:]]
    assert min(sizes) >= 12
    assert "@media (max-width:640px){.lab-path{grid-template-columns:1fr}" in html  # one column on a phone
    assert html.count("not needed yet") == sum(not c["on"] for c in path)


# ---------------------------------------------------------------- settings

def test_viewers_get_the_viewer_toolbar_and_an_offline_favicon():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"
    script = (ROOT / "navigation.py").read_text()
    icon = script.split("page_icon=")[1].split(",")[0].strip("\"' ")
    assert not icon.startswith("http") and (ROOT / icon).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_lab_never_quotes_two_different_ttfts_for_one_deployment_without_saying_why():
    # the Prototype card: the recommendation quoted p99 TTFT 1.81 s (one request at a time), and the
    # metric right below it read 1.36 s (the toggles' static batching), with nothing to tell them apart
    from core.lab.report import lab_view
    from core.text import fmt_ms
    for card in content.scenarios():
        inputs = content.scenario_inputs(card)
        view = lab_view(inputs)
        if view["result"] is None or not view["recommendation"].met:
            continue
        shown = next(m["value"] for m in view["headline"] if m["label"] == "p99 TTFT")
        quoted = view["recommendation"].reason.split("p99 TTFT ")[1].split(",")[0]
        if shown != quoted:
            assert view["differs"] and "not the recommended shape" in view["differs"], card["id"]
            if card["id"] == "prototype":  # and in what
                assert "scheduling: request-level (static) batching here, one request at a time there" in view["differs"]
        else:
            assert shown == fmt_ms(view["result"].summary["ttft_ms"]["p99"])


def test_the_planners_two_legends_do_not_share_a_row():
    # side by side under a half-width chart, the shape legend ran off it ('stage 5 ◆ front')
    rows = [dict(usd_per_hour=4.0 * g, ttft_p99_ms=100.0 / g, deployment=f"{g} H100", stage=3, frontier=g == 1,
                 meets=True, max_rate_req_s=10.0 * g) for g in (1, 2, 4)]
    enc = charts.frontier(rows, "ttft_p99_ms", "p99 TTFT", 1000).to_dict()
    legends = [layer["encoding"][ch]["legend"]["orient"] for layer in enc["layer"] for ch in ("color", "shape")
               if ch in layer.get("encoding", {}) and layer["encoding"][ch].get("legend")]
    assert len(legends) == 2 and len(set(legends)) == 2


def test_near_knees_of_several_deployments_are_named_in_the_legend_not_overprinted():
    # three deployments kneeing at 64 users a few pixels apart printed 'knee: 64 users' three times over
    def levels(name, scale, knee):
        return [dict(deployment=name, users=u, tok_s_per_user=100.0 / u ** 0.3, output_tok_s_per_gpu=scale * u ** 0.5,
                     knee=u == knee, ttft_p50_ms=50.0, ttft_p99_ms=90.0, tpot_p99_ms=10.0) for u in (1, 8, 64, 256)]
    several = spec(charts.interactivity(levels("A", 100, 64) + levels("B", 105, 64) + levels("C", 98, 8), 100))
    texts = [layer for layer in layers(several) if layer["mark"]["type"] == "text" and "knee" in str(layer)]
    assert texts == []
    domain = next(layer["encoding"]["color"]["scale"]["domain"] for layer in layers(several)
                  if "color" in layer.get("encoding", {}))
    assert domain == ["A · knee at 64 users", "B · knee at 64 users", "C · knee at 8 users"]
    one = spec(charts.interactivity(levels("A", 100, 64), 100))
    named = [r for layer in layers(one) if layer["mark"]["type"] == "text"
             for r in one["datasets"][layer["data"]["name"]] if "knee" in str(r.get("text", ""))]
    assert [r["text"] for r in named] == ["knee: 64 users"]


def test_compares_distributions_fit_a_phone():
    # two facets of a fixed 330 px ran off a 390-px screen: each metric is its own chart, as wide as its column
    from ui import compare
    rows = [dict(deployment="1. x", metric=m, ms=float(v), share=v / 10) for m in ("TTFT", "TPOT") for v in range(1, 10)]
    for metric in ("TTFT", "TPOT"):
        spec = compare.distributions_chart(rows, metric).to_dict()
        assert "width" not in spec and "facet" not in spec and spec["title"] == metric


def test_a_long_chart_title_is_broken_into_lines_a_phone_shows_whole():
    # one line, Vega cut these off on a 390-px phone: "...against b...", "...the path nev..."
    rows = [dict(card=f"card {i}", stage=i, name="x") for i in range(1, 4)]
    title = spec(charts.stage_path(rows))["title"]
    assert isinstance(title, list) and all(len(line) <= 40 for line in title)  # about 40 characters fit
    assert " ".join(title) == "The recommended stage along the path never goes back"  # nothing lost
    short = spec(charts.line([dict(a=1, b=2)], "a", "b", "a", "b", "Decode throughput against batch"))
    assert short["title"] == "Decode throughput against batch"


def test_the_kv_sweeps_caption_names_where_the_cache_first_runs_out_not_the_worst_point():
    # the chart reached 100% at 2,048 output tokens while the caption said "At 4,096 ... the cache runs out"
    from core.lab.sweeps import output_caption
    rows = [dict(output_tokens=o, peak_kv=p, preemptions=n) for o, p, n in
            ((512, 0.1, 0), (1024, 0.25, 0), (2048, 1.0, 40), (4096, 1.0, 3234))]
    assert output_caption(rows).startswith("From 2,048 output tokens the cache runs out")
    assert "3,234 preemptions at 4,096" in output_caption(rows)
    full = [dict(r, preemptions=0) for r in rows[:3]] + [rows[3]]
    assert output_caption(full).startswith("At 2,048 output tokens the cache is full at its peak")


def test_compares_distributions_span_their_data():
    # 7-8 ms TPOTs sat in the last tenth of a 1-10 ms axis
    from ui import compare
    rows = [dict(deployment="1. x", metric="TPOT", ms=7.0 + v / 10, share=v / 10) for v in range(1, 11)]
    x = compare.distributions_chart(rows, "TPOT").to_dict()["encoding"]["x"]
    lo, hi = x["scale"]["domain"]
    assert 5 <= lo <= 7.1 and 8 <= hi <= 10
    assert all(is_125(v) for v in x["axis"]["values"])


def test_your_benchmark_names_one_upload_limit():
    # the uploader said '68MB per file' (MiB) above '67 MB' (millions of bytes): two limits for one
    from streamlit.testing.v1 import AppTest

    from core.serving import benchfile
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "navigation.py"), default_timeout=120)
    at.run()
    at.switch_page("views/benchmark.py").run()
    assert not at.exception
    mib = benchfile.MAX_BYTES / 1024**2
    assert any(f"up to {mib:.0f} MiB" in i.value for i in at.info)
    uploader = next(u for u in at.get("file_uploader") if u.proto.label.startswith("Benchmark result"))
    assert uploader.proto.max_upload_size_mb == mib  # Streamlit's 'MB' are MiB: the same limit as the parser's


def test_a_gauge_is_drawn_as_text_with_its_bar_within_the_limit():
    from core.lab.gauges import Gauge
    from ui import widgets
    over = Gauge(id="kv", name="KV cache <pressure>", value=3.0, limit=1.0, unit="", ratio=3.0, status="bad",
                 why="<img src=x onerror=alert(1)> & more", knob="raise <b>gpus</b>")
    out = widgets.gauges_html([over], columns=1)
    assert "<img" not in out and "&lt;img src=x" in out and "&lt;b&gt;gpus" in out
    assert 'aria-valuenow="100"' in out and "width:100.0%" in out  # three times the limit: a full bar, not 300%
    assert "limiting" in out and "Peak 300% of KV blocks in use" in out
