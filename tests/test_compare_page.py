"""The Compare view, driven headless: pin deployments, read them side by side, unpin."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


def compare_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception
    return at


def columns(at: AppTest) -> list[str]:
    return [c for c in at.dataframe[0].value.columns if c != "metric"]


def test_pinned_deployments_side_by_side_with_what_limits_each():
    at = compare_page()
    assert "Nothing pinned yet" in at.info[0].value
    at.button(key="pin_lab").click().run()
    at.select_slider[[s.label for s in at.select_slider].index("GPUs")].set_value(2)
    at.button[[b.label for b in at.button].index("Pin")].click().run()  # the form's submit button
    assert not at.exception
    cols = columns(at)
    assert len(cols) == 2 and cols[0].startswith("1. 1 x") and cols[1].startswith("2. 2 x")
    table = at.dataframe[0].value.set_index("metric")
    # twice the GPUs serve the same traffic at twice the hourly cost
    c1, c2 = (float(table.loc["Cost per hour", c].strip("$")) for c in cols)
    assert c2 == 2 * c1
    assert "Limiting gauge" in table.index
    assert len(at.get("vega_lite_chart")) == 2  # TTFT and TPOT side by side, each as wide as its column (a phone stacks them)
    at.button(key="unpin-0").click().run()
    assert len(columns(at)) == 1


def test_at_most_four_and_a_deployment_that_cannot_run_says_why():
    at = compare_page()
    slider = lambda: at.select_slider[[s.label for s in at.select_slider].index("GPUs")]
    for n in (1, 2, 3, 4, 6):
        slider().set_value(n)
        at.button[[b.label for b in at.button].index("Pin")].click().run()
    cols = columns(at)
    assert len(cols) == 4 and cols[0].startswith("1. 2 x")  # the oldest gave way
    at.select_slider[[s.label for s in at.select_slider].index("tp")].set_value(16)
    slider().set_value(1)
    at.button[[b.label for b in at.button].index("Pin")].click().run()
    assert not at.exception
    assert any("Not pinned" in t.value for t in at.toast)
