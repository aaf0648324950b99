"""Benchmark result files: the real published ones read as their tools wrote them, broken ones
refused with the line and field named."""
import json
from pathlib import Path

import numpy as np
import pytest

from core.serving import benchfile

FIX = Path(__file__).parent / "fixtures" / "bench"
VLLM_4 = FIX / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qps04.json"
VLLM_INF = FIX / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qpsinf.json"
SGL_70B = FIX / "sglang-dec2024_llama-3.3-70b_tp4_4xh200_online.jsonl"
SGL_INF = FIX / "sglang-dec2024_deepseek-v2-family_tp8-dpattn_8xh200_offline.jsonl"


def parse(path):
    return benchfile.parse(path.read_bytes(), path.name)


def test_vllm_file_per_request_arrays_agree_with_its_summary():
    run, = parse(VLLM_4)
    assert run.tool == "vllm" and run.request_rate == 4.0 and run.detailed and run.completed == 200
    assert run.input_lens.sum() == 42659 and run.output_lens.sum() == 42449  # the file's own totals
    # the median TTFT recomputed from the per-request TTFTs (s) matches the summary's (ms)
    assert np.median(run.ttfts_s) * 1e3 == pytest.approx(49.50005649993727, rel=1e-9)
    # E2E is not in this old file: rebuilt from TTFT plus the streamed gaps
    assert run.measured["e2e"]["mean"] == pytest.approx(np.mean(run.latencies_s) * 1e3)


def test_measured_figures_match_the_published_summary_table():
    """vLLM's nightly-benchmark table, made from the same run by a different script."""
    table = json.loads((FIX / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_benchmark_results.json").read_text())
    row = next(r for r in table if r["Test name"] == "tp8_pp1_qps_04")
    m = parse(VLLM_4)[0].measured
    assert m["ttft"]["p99"] == pytest.approx(row["P99 TTFT (ms)"])
    assert m["tpot"]["p50"] == pytest.approx(row["Median TPOT (ms)"])
    assert m["throughput"]["output_tok_s"] == pytest.approx(row["Output Tput (tok/s)"])


def test_rate_inf_as_a_string_and_as_a_bare_infinity():
    assert parse(VLLM_INF)[0].request_rate == float("inf")
    run, = parse(SGL_INF)
    assert run.tool == "sglang" and run.request_rate == float("inf")


def test_sglang_json_lines_hold_one_run_per_line():
    runs = parse(SGL_70B)
    assert [r.line for r in runs] == list(range(1, 8))
    assert [r.request_rate for r in runs[:5]] == [1, 2, 4, 8, 16]
    r = runs[0]
    assert not r.detailed and r.dataset == "random" and r.length_hints["random_input_len"] == 1024
    # this schema has no request_throughput: completed / duration
    assert r.measured["throughput"]["req_s"] == pytest.approx(300 / 298.3675805060193)


def good() -> dict:
    return json.loads(VLLM_4.read_text())


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d.update(completed="many"), ["line 1", "'completed'", "number"]),
    (lambda d: d.update(request_rate=-1), ["'request_rate'"]),
    (lambda d: d.pop("duration"), ["'duration'", "missing"]),
    (lambda d: d.update(ttfts=d["ttfts"][:10]), ["'ttfts'", "10 entries", "200 requests"]),
    (lambda d: d["input_lens"].__setitem__(3, 1.5), ["'input_lens'", "entry 3", "whole number"]),
    (lambda d: d["itls"].__setitem__(7, "fast"), ["'itls'", "entry 7"]),
    (lambda d: d.update(completed=0), ["'completed'", "nothing to compare"]),
])
def test_a_broken_field_is_named(mutate, words):
    d = good()
    mutate(d)
    with pytest.raises(ValueError) as e:
        benchfile.parse(json.dumps(d), "r.json")
    for w in words:
        assert w in str(e.value)


def test_broken_json_names_its_line():
    lines = SGL_70B.read_text().splitlines()
    lines[3] = lines[3][:-5]  # truncate the fourth run
    with pytest.raises(ValueError, match="line 4: not valid JSON"):
        benchfile.parse("\n".join(lines), "x.jsonl")
    with pytest.raises(ValueError, match="line 2"):
        benchfile.parse('{\n "completed": 1,,\n}', "x.json")


@pytest.mark.parametrize("text, words", [
    ("", "empty"), ("[1, 2]", "expected a JSON object"), ('{"hello": 1}', "not a benchmark result"),
    ("[" * 100000, "nested too deeply"), (b"\xff\xfe{}", "not UTF-8"),
])
def test_files_that_are_not_results_are_refused(text, words):
    with pytest.raises(ValueError, match=words):
        benchfile.parse(text, "x.json")


def test_size_cap():
    with pytest.raises(ValueError, match="above the 67 MB limit"):
        benchfile.parse(b" " * (benchfile.MAX_BYTES + 1), "big.json")


def test_failed_requests_are_left_out_of_the_replay():
    d = good()
    d["output_lens"][0], d["ttfts"][0], d["itls"][0], d["errors"][0] = 0, 0.0, [], "timeout"
    run, = benchfile.parse(json.dumps(d), "r.json")
    assert len(run.input_lens) == 199 and run.input_lens[0] == d["input_lens"][1]


def test_a_result_without_tool_keys_names_each_wrong_value_and_why():
    # a hand-made or truncated result: no 'backend' or 'model_id', but its fields are a result's
    with pytest.raises(ValueError) as e:
        benchfile.parse('{"date":"x","completed":"ten","request_rate":-1}', "mine.json")
    said = str(e.value)
    assert "'completed' is \"ten\", not a whole number of requests" in said
    assert "'request_rate' is -1: it must be above 0 req/s, or inf" in said
    assert "'duration'" in said and "missing" in said
    assert "no 'completed'" not in said  # it has one: its value is what is wrong


@pytest.mark.parametrize("value, words", [
    ("-3", "'completed' is -3, not a whole number of requests"),
    ("2.5", "'completed' is 2.5, not a whole number of requests"),
    ("true", "'completed' is true, not a whole number of requests"),
])
def test_a_wrong_count_says_what_a_count_is(value, words):
    d = good()
    text = json.dumps(d).replace('"completed": 200', f'"completed": {value}')
    with pytest.raises(ValueError) as e:
        benchfile.parse(text, "r.json")
    assert words in str(e.value)
