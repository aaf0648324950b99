"""Normal evolution scenarios: cards that set the workload, left to right."""
import streamlit as st

from core.lab import content, stages
from ui import cache, charts, export, state

st.title("Normal evolution scenarios")
st.markdown("Click left to right for the intended demo path. Each card changes the **workload inputs**, not the "
            "architecture: the recommended stage follows from simulating them.")

cards = content.scenarios()
with st.spinner("Simulating each card's workload..."):
    recs = []
    for card in cards:
        inp = content.scenario_inputs(card)
        recs.append(stages.simplest_stage(cache.stages(inp), inp))


def _open(card: dict) -> None:
    state.load(card["inputs"])


for row in range(0, len(cards), 3):
    cols = st.columns(3)
    for col, card, rec, i in zip(cols, cards[row:row + 3], recs[row:row + 3], range(row, row + 3)):
        with col.container(border=True):
            st.markdown(f"**{i + 1}. {card['title']}** {card['icon']}")
            st.caption(card["story"])
            st.markdown(content.card_lines(card["inputs"]))
            st.markdown(f":violet-badge[Stage {rec.stage}: {rec.name}]" if rec.met else
                        ":red-badge[No stage meets the targets]")
            if not rec.met:  # why, in the words every view uses (an overloaded queue says what it serves)
                st.caption(rec.reason)
            if st.button("Load into the Lab", key=f"load_{card['id']}", on_click=_open, args=(card,), type="primary",
                         icon=":material/arrow_forward:"):
                st.switch_page("views/lab.py", query_params={})  # the sidebar binds the URL itself

path = [dict(card=f"{i + 1}. {c['title']}", stage=r.stage, name=r.name) for i, (c, r) in enumerate(zip(cards, recs))]
st.altair_chart(charts.stage_path(path), width="stretch")
export.table([dict(p, meets_targets=r.met, **content.scenario_inputs(c).to_dict()) for p, c, r in zip(path, cards, recs)],
             "scenario cards and the stage each needs", "scenarios", "Scenarios (CSV)")
