"""A bounded fuzz of every view (AppTest): random sidebar input sets over each widget's full range,
trace uploads among them (valid, malformed and hostile), every view at least once. Nothing may raise,
reach the last-resort guard or hang. The suite runs a fixed seed and a small count (LAB_FUZZ_SETS,
default 100, with at most 2,000 simulated requests so that it stays quick); bench/fuzz_views.py runs
1,000 sets over every request count and times each page."""
import os

from view_fuzz import PAGES, fuzz

SETS = int(os.environ.get("LAB_FUZZ_SETS", "100"))


def test_every_view_answers_random_inputs_without_an_exception():
    outcomes = fuzz(SETS, seed=17, max_requests=2000, timeout_s=240)
    assert {o.page for o in outcomes} == set(PAGES)
    failed = [(o.page, o.problem, o.inputs, o.upload) for o in outcomes if o.problem]
    assert not failed, failed[:3]
