"""Every view that shows results offers them as files: a table as CSV and the runs behind it as
JSON, so that a person can take any number out of the dashboard without copying it."""
import pytest
from streamlit.testing.v1 import AppTest

from test_pages import ROOT

VIEWS = ["views/lab.py", "views/walkthrough.py", "views/bottlenecks.py", "views/tradeoffs.py",
         "views/scenarios.py"]


@pytest.fixture(scope="module")
def at():
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    assert not at.exception
    return at


@pytest.mark.parametrize("page", VIEWS)
def test_every_results_view_downloads_csv_and_json(at, page):
    at.switch_page(page).run()
    assert not at.exception, at.exception
    names = [b.proto.label for b in at.get("download_button")]
    assert any("(CSV)" in n for n in names), (page, names)
    if page != "views/scenarios.py":  # the cards' table is the whole result there
        assert any("(JSON)" in n for n in names), (page, names)

