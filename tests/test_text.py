"""Numbers and comparisons read as a person would say them."""
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import text
from core.lab import content
from core.lab.inputs import LabInputs
from core.lab.tradeoffs import ab, verdict


def test_a_big_improvement_is_a_multiple_not_a_percentage():
    assert text.change(6900, 3_000_000, text.fmt_ms, "faster", "slower") == "6.90 s, down from 50.0 min (435× faster)"
    assert text.change(3.93, 3.931, lambda x: f"{x:.2f} req/s") == "unchanged at 3.93 req/s"
    assert text.change(110, 100, lambda x: f"{x:.0f}") == "110, up from 100 (10% higher)"


@given(st.floats(1e-3, 1e7), st.floats(1e-3, 1e7))
def test_no_change_reads_as_minus_100_or_thousands_of_percent(new, old):
    words = text.change_size(new, old)
    assert "-" not in words and "+" not in words
    pct = re.search(r"(\d+)%", words)
    if pct:
        assert 1 <= int(pct.group(1)) <= 50  # beyond 1.5 times it is a multiple; never "0% lower"


def test_a_change_too_small_for_a_whole_percent_or_from_zero_is_said_in_words():
    assert text.change_size(1024, 1027) == "under 1% lower"  # it read "0% lower"
    assert text.change_size(0.56, 0.0) == "up from zero" and text.change_size(0.0, 0.2) == "down to zero"
    assert text.change(0.56, 0.0, lambda x: f"{x:.2f} req/s") == "0.56 req/s, up from 0.00 req/s"


@given(st.integers(0, 10**11))  # past any run the Lab admits (100,000 requests of 128K tokens: 1.3e10)
def test_a_token_count_fits_a_card_and_keeps_three_figures(n):
    words = text.token_count(n)
    assert len(words) <= 12 and words.endswith(" tokens")  # a card cuts its value near 12 characters
    number = words.split()[0]
    scale = {"k": 1e3, "M": 1e6, "B": 1e9}.get(number[-1], 1)
    value = float(number.rstrip("kMB").replace(",", "")) * scale
    assert abs(value - n) <= 0.005 * n + 0.5  # rounded to three figures at most
    assert text.token_count(3_694_592) == "3.69M tokens" and text.token_count(9_999) == "9,999 tokens"


def test_durations_climb_through_units():
    assert [text.fmt_ms(x) for x in (74.4, 1500, 90_000, 7_200_000)] == ["74 ms", "1.50 s", "1.5 min", "2.0 h"]


def test_trade_off_verdicts_are_sentences_without_signed_percentages():
    inputs = LabInputs(**content.rules()["orca"]["demo"])
    for t in content.tradeoffs():
        v = verdict(ab(inputs, t["id"]))
        assert v[:1].isupper(), v
        assert not re.search(r"[-+]\d+(\.\d+)?%", v), v  # "+256308%" reads as nothing
        for pct in re.findall(r"(\d+)% (?:higher|lower|faster|slower|cheaper|dearer|fewer|more)", v):
            assert int(pct) <= 50, v  # past 1.5 times a change is a multiple


def test_a_benchmarks_error_reads_in_words_not_signed_percentages():
    against = text.against  # the Benchmark view's table and the command line's share it
    assert against(7.0) == "8× higher" and against(-0.5) == "2× lower"  # it read "+700.0%" and "-50.0%"
    assert against(0.12) == "12% higher" and against(float("nan")) == "n/a" and against(0.0) == "the same"


def test_the_command_lines_calibration_table_says_its_errors_in_words(capsys):
    from core.cli.yourdata import _table
    rows = [dict(metric="TTFT median", unit="ms", measured=100.0, simulated=112.3, error=0.123),
            dict(metric="TPOT median", unit="ms", measured=20.0, simulated=19.0, error=-0.05),
            dict(metric="Output throughput", unit="tok/s", measured=673.92, simulated=635.36, error=-0.057)]
    after = [dict(r, simulated=r["measured"], error=0.0) for r in rows]
    table = "\n".join(_table(rows, after))
    assert not re.search(r"[-+]\d+(\.\d+)?%", table), table  # it read "+12.3%" and "-5.0%"
    assert "12% higher" in table and "5% lower" in table and "the same" in table
    ends = {re.search(r"\d+\.\d\d", line).end() for line in table.splitlines()[1:]}
    assert len(ends) == 1  # the measured figures line up: a long label pushed its row's out of the column


def test_the_kv_cache_trade_off_says_chunked_prefill_is_off_on_both_sides():
    # its p50 TTFT (19 ms) differed from the Lab's (36 ms, chunked prefill on) without a word why
    from core.lab.tradeoffs import _ab_configs
    off, on, note = _ab_configs(LabInputs(), "kv_cache")
    assert {off.policy, on.policy} == {"orca", "vllm"} and "Chunked prefill is off on both sides" in note
    assert "Chunked prefill" not in _ab_configs(LabInputs(chunked_prefill=False), "kv_cache")[2]


@pytest.mark.parametrize("engine,chunked", [("sglang", True), ("trtllm", False)])
def test_the_kv_cache_trade_off_under_another_engine_says_whose_host_both_sides_take(engine, chunked):
    # under SGLang the Lab chunks prompts, yet the note said nothing of it being off on both sides,
    # nor that both layouts ran with the engine's host
    from core.lab.tradeoffs import _ab_configs
    off, on, note = _ab_configs(LabInputs(engine=engine), "kv_cache")
    assert off.engine_overhead == on.engine_overhead == engine
    assert ("Chunked prefill is off on both sides" in note) == chunked
    assert {"sglang": "SGLang's host", "trtllm": "TensorRT-LLM's host"}[engine] in note
