"""Decision trade-offs: what each design choice gains and costs, with a live A/B on the workload."""
import pandas as pd
import streamlit as st

from core.lab import content, tradeoffs
from core import text
from ui import cache, state

st.title("Decision trade-offs")
st.markdown("Why this changes: six choices the design makes as the workload grows. Each is simulated off and on, "
            "on the sidebar's workload.")

inputs = state.valid_inputs()
rules = content.rules()

ROWS = [("p50 TTFT", lambda s: text.fmt_ms(s["ttft_ms"]["p50"])),
        ("p99 TTFT", lambda s: text.fmt_ms(s["ttft_ms"]["p99"])),
        ("p50 TPOT", lambda s: f"{s['tpot_ms']['p50']:.1f} ms"),
        ("p99 TPOT", lambda s: f"{s['tpot_ms']['p99']:.1f} ms"),
        ("p50 time to the whole answer", lambda s: f"{s['e2e_s']['p50']:.2f} s"),
        ("throughput", lambda s: f"{s['throughput_tok_s']:,.0f} tok/s"),
        ("goodput", lambda s: f"{s['goodput_req_s']:.2f} req/s"),
        ("mean batch", lambda s: f"{s['mean_batch']:.1f} sequences"),
        ("KV utilisation", lambda s: f"{s['kv_utilization']:.0%}"),
        ("preemptions", lambda s: f"{s['preemptions']:,}"),
        ("GPU-hours", lambda s: f"{s['gpu_hours']:.3f} h"),
        ("cost per 1M output tokens", lambda s: f"${s['cost_per_1m_tokens_usd']:.2f}")]

for t in content.tradeoffs():
    st.subheader(t["title"])
    left, right = st.columns([2, 3])
    with left:
        st.markdown(f":green-badge[Gains] {t['gains']}")
        st.markdown(f":red-badge[Costs] {t['costs']}")
        st.markdown(f":blue-badge[Choose it when] {t['choose_when']}")
        links = [f"[{rules[r]['citation']['label']}]({rules[r]['citation']['link']}) ({content.cite(rules[r])})"
                 for r in t["rules"] if r in rules]
        if links:
            st.caption("Sources: " + "; ".join(links))
    with right:
        with st.spinner(f"Simulating {t['title'].lower()} off and on..."):
            ab = cache.tradeoff(inputs, t["id"])
        if ab.error:
            st.info(ab.error, icon=":material/info:")
            continue
        st.markdown(f"**On this workload:** {tradeoffs.verdict(ab)}")
        if t["id"] == "streaming":
            s = ab.on.summary
            table = pd.DataFrame({"what the client sees": ["first token (p50)", "first token (p99)", "whole answer (p50)",
                                                           "whole answer (p99)"],
                                  "streaming": [text.fmt_ms(s["ttft_ms"]["p50"]), text.fmt_ms(s["ttft_ms"]["p99"]),
                                                "", ""],
                                  "waiting for the whole answer": ["", "", f"{s['e2e_s']['p50']:.2f} s",
                                                                   f"{s['e2e_s']['p99']:.2f} s"]})
        else:
            st.caption(f"**Off:** {ab.off_label}.  \n**On:** {ab.on_label}.")
            table = pd.DataFrame({"metric": [r[0] for r in ROWS], "off": [f(ab.off.summary) for _, f in ROWS],
                                  "on": [f(ab.on.summary) for _, f in ROWS]})
        st.table(table.set_index(table.columns[0]))
        if ab.note:
            st.caption(ab.note)
