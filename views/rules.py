"""Rules & sources: the source-backed rules behind the Lab, each with its citation and a button that
opens the Lab on a workload where the simulation shows it; then the teaching assumptions."""
import streamlit as st

from core.lab import content
from core.lab.assumptions import assumptions
from core.lab.inputs import LabInputs
from ui import state, widgets

st.title("Rules & sources")
st.markdown(
    "These are the durable system-design claims behind the model, each with its source. **Show in the Lab** "
    "opens the Lab on a workload where the simulation shows the claim. The simulator's own modelling choices "
    "are listed below them, labelled as teaching assumptions.")

try:
    rules = list(content.rules().values())
    items = assumptions()
except ValueError as e:
    widgets.show_error(e, "The rules")
    st.stop()


def open_demo(demo: dict) -> None:
    # A callback runs before the sidebar is drawn, the only time its widgets may be set. Fields the
    # demo leaves out go back to the Lab's defaults, so the demo opens the same way every time.
    state.load(LabInputs(**demo).to_dict())


def card(rule: dict) -> None:
    with st.container(border=True):
        if rule["seed_rule"]:
            st.badge("Verified rule", icon=":material/verified:", color="green")
        else:
            st.badge(f"Published result: {rule['citation']['label']}", icon=":material/article:", color="blue")
        st.markdown(f"**{rule['title']}**")
        st.markdown(rule["claim"])
        st.caption(content.full_citation(rule["citation"]))
        if st.button("Show in the Lab", key=f"demo_{rule['id']}", icon=":material/science:", on_click=open_demo,
                     args=(rule["demo"],)):
            # query_params={}: the default (None) clears the URL with a call that refuses while sidebar
            # widgets are bound to it; the widgets write their new values back on the next run.
            st.switch_page("views/lab.py", query_params={})
        st.caption(f":material/tune: **Workload:** {content.describe_workload(LabInputs(**rule['demo']))}.  \n"
                   f":material/visibility: **Look at:** {rule['demo_note']}")


def grid(cards: list[dict]) -> None:
    for col, rule in widgets.in_rows(cards, 2):
        with col:
            card(rule)


st.header("Source-backed rules")
grid([r for r in rules if r["seed_rule"]])
st.subheader("Published results the simulator reproduces")
st.caption("Each paper's headline number is its own measurement on its own hardware; the Lab reproduces the "
           "direction of the effect on the simulated workload, not the number.")
grid([r for r in rules if not r["seed_rule"]])

st.header("Teaching assumptions")
st.caption("Not sourced rules: these are the modelling choices of this simulator, with their numbers read live "
           "from its fitted constants and calibration reports. The seed's three teaching assumptions come first, "
           "each followed by what the simulator does instead.")
for col, a in widgets.in_rows(items, 2):
    with col, st.container(border=True):
        st.badge("Teaching assumption", icon=":material/lightbulb:", color="orange")
        st.markdown(f"**{a['title']}**")
        if a.get("seed_text"):
            st.caption(f"The seed assumed: {a['seed_text']}")
            st.markdown(f"**This simulator instead:** {a['text']}")
        else:
            st.markdown(a["text"])
