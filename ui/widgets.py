"""Shared page elements: the architecture diagram, gauges, headline metrics, error messages."""
from __future__ import annotations

import html

import streamlit as st

from core.bounds import DataError
from core.lab.gauges import Gauge
from core.serving import metrics

STATUS_WORD = {"ok": "fine", "warn": "getting close", "bad": "limiting"}


DIAGRAM_CSS = """<style>
.lab-path{margin:0 0 0.5rem;padding:0;display:grid;gap:14px 22px;
  grid-template-columns:repeat(4,minmax(0,1fr));font-family:inherit}
.lab-path .part{position:relative;border-radius:8px;padding:8px 12px;font-size:14px;line-height:1.35;
  border:2px solid #7c3aed;background:#ede9fe;color:#1e1b4b}
.lab-path .part.off{border:1px dashed #cbd5e1;background:#f8fafc;color:#64748b}
.lab-path .part b{display:block;font-size:16px}
.lab-path .part:not(:last-child)::after{content:"\\2192";position:absolute;right:-19px;top:50%;
  transform:translateY(-50%);color:#64748b;font-size:16px}
.lab-path .part:nth-child(4n)::after{content:none}
@media (max-width:900px){.lab-path{grid-template-columns:repeat(2,minmax(0,1fr))}
  .lab-path .part:nth-child(4n)::after{content:"\\2192"}
  .lab-path .part:nth-child(2n)::after{content:none}}
@media (max-width:640px){.lab-path{grid-template-columns:1fr}
  .lab-path .part:not(:last-child)::after{content:"\\2193";right:50%;top:auto;bottom:-19px;transform:none}}
</style>"""


def diagram_html(path: list[dict]) -> str:
    """The component path in the order a request takes it, as an HTML list: four parts a row on a
    wide screen, two on a narrow one, one under another on a phone; the parts a deployment does not
    need yet are greyed. Text stays at 14-16 px whatever the width (a scaled picture would shrink it)."""
    items = []
    for i, c in enumerate(path, 1):
        body = html.escape(c["role"]) if c["on"] else "not needed yet"
        items.append(f'<div role="listitem" class="part{"" if c["on"] else " off"}"><b>{i}. {html.escape(c["name"])}</b>'
                     f'{body}</div>')
    # a list by role, not an <ol>: the page's own list styles would indent it
    return DIAGRAM_CSS + '<div role="list" class="lab-path" aria-label="Component path">' + "".join(items) + "</div>"


GAUGE_CSS = """<style>
.lab-gauges{display:grid;grid-template-columns:repeat(var(--cols),minmax(0,1fr));gap:16px;margin:0 0 1rem;
  font-family:inherit}
.lab-gauges .gauge{border:1px solid rgba(49,51,63,0.2);border-radius:0.5rem;padding:12px 16px;font-size:16px;
  line-height:1.5;color:rgb(49,51,63)}
.lab-gauges .badge{display:inline-block;margin-left:6px;padding:0 8px;border-radius:0.5rem;font-size:14px}
.lab-gauges .badge.ok{background:#dcfce7;color:#166534}
.lab-gauges .badge.warn{background:#ffedd5;color:#9a3412}
.lab-gauges .badge.bad{background:#fee2e2;color:#991b1b}
.lab-gauges .bar{height:8px;margin:6px 0 8px;border-radius:4px;background:#f0f2f6;overflow:hidden}
.lab-gauges .bar span{display:block;height:100%;background:#7c3aed}
.lab-gauges .note{font-size:14px;color:rgba(49,51,63,0.6)}
@media (max-width:640px){.lab-gauges{grid-template-columns:1fr}}
</style>"""
STATUS_MARK = {"ok": "\u2713", "warn": "\u26a0", "bad": "\u2715"}


def gauges(items: list[Gauge], columns: int = 2) -> None:
    """Gauges as one block of HTML, `columns` a row (one on a phone): each its name and status, its
    reading, a bar, why and the knob. One element, not three Streamlit elements a gauge: drawing the
    Lab's five as widgets took the browser about half a second on every page (bench/first_visit.py)."""
    st.html(gauges_html(items, columns))


def gauge(g: Gauge) -> None:
    gauges([g], columns=1)


def gauges_html(items: list[Gauge], columns: int) -> str:
    parts = []
    for g in items:
        share = min(max(g.ratio, 0.0), 1.0)
        notes = [html.escape(g.why), f"<b>Knob:</b> {html.escape(g.knob)}"]
        notes += [html.escape(g.detail)] if g.detail else []
        parts.append(
            f'<div role="listitem" class="gauge {g.status}"><b>{html.escape(g.name)}</b>'
            f'<span class="badge {g.status}">{STATUS_MARK[g.status]} {STATUS_WORD[g.status]}</span>'
            f'<div>{html.escape(g.reading)}</div>'
            f'<div class="bar" role="meter" aria-label="{html.escape(g.name)}" aria-valuemin="0" aria-valuemax="100" '
            f'aria-valuenow="{share * 100:.0f}"><span style="width:{share * 100:.1f}%"></span></div>'
            + "".join(f'<div class="note">{n}</div>' for n in notes) + "</div>")
    return (GAUGE_CSS + f'<div role="list" class="lab-gauges" style="--cols:{columns}" aria-label="Bottlenecks">'
            + "".join(parts) + "</div>")


# A metric card cuts a value or note longer than its width ('2,146 to...' in a quarter of a 1280-pixel
# laptop's page): the figure shrinks with its card (container query units: 100cqi is the card's
# width; 36 px where the card is wide enough) and what is still too long wraps at a space
# ('2,146' over 'tok/s') instead of being cut; so do a long label and a long note, and a note's
# comparison ('vs stage 2') goes under its chip when the two do not fit side by side. A Markdown
# badge wraps too ('Stage 1: One GPU, one request at a t...' on a scenario card).
PAGE_CSS = """<style>
[data-testid='stMetric']{container-type:inline-size}
[data-testid='stMetricValue']{font-size:min(2.25rem,16cqi);line-height:1.2}
[data-testid='stMetric'] [data-testid='stMetricValue'] *,[data-testid='stMetric'] [data-testid='stMetricDelta'] *,
[data-testid='stMetric'] [data-testid='stMetricLabel'] *,[data-testid='stMetric'] [data-testid='stMetricDeltaDescription'] *{
  white-space:normal;overflow:visible;text-overflow:clip;overflow-wrap:normal}
[data-testid='stMetric'] div:has(> [data-testid='stMetricDelta']){flex-wrap:wrap;row-gap:2px}
[data-testid='stMarkdownContainer'] span.stMarkdownBadge{white-space:normal}
</style>"""


def page_style() -> None:
    """Style shared by every page (a style-only element: Streamlit gives it no room on the page)."""
    st.html(PAGE_CSS)


def in_rows(items: list, columns: int):
    """(column, item) pairs filled a row at a time: a phone stacks columns, so filling them row by
    row keeps the reading order there too."""
    for start in range(0, len(items), columns):
        yield from zip(st.columns(columns), items[start:start + columns])


def headline(items: list[dict], columns: int = 4) -> None:
    """Metric cards, a row of `columns` at a time, so that a phone, which stacks columns, reads them
    in order. A card's target is coloured by whether it is met; a note is plain."""
    for col, m in in_rows(items, columns):
        with col:
            value, growing = split_growing(m["value"])
            delta = m.get("target") or m.get("note")
            color = ("normal" if m.get("ok", True) else "inverse") if m.get("target") else "off"
            if growing:  # under the figure, which stays on one line: '15.2 s' / 'and growing · target 1.00 s'
                delta, color = "and growing" + (f" · {delta}" if delta else ""), "inverse"
            st.metric(m["label"], value, delta=delta, delta_color=color, delta_arrow="off",
                      help=m.get("help"), border=True)


def split_growing(value: str) -> tuple[str, bool]:
    """A latency that grows with the run ('15.2 s and growing') as the figure and whether it grows: a
    figure reads best on one line ('15.2 s', not '15.2 s' over 'and growing'), so the words go under it."""
    if value.endswith(metrics.GROWING):
        return value[:-len(metrics.GROWING)], True
    return value, False


def literal(text: str) -> str:
    """`text` as a Markdown code span: shown as typed, never read as Markdown, HTML, a link or an
    image (an uploaded file's or a link's own words may be any of those)."""
    text = " ".join(str(text).split())
    run = best = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        best = max(best, run)
    fence = "`" * (best + 1)  # longer than any run of backticks inside
    return f"{fence} {text} {fence}"


def message(e: Exception) -> str:
    """An exception's message for a page: data a person uploaded or linked is quoted as plain text."""
    return literal(str(e)) if isinstance(e, DataError) else str(e)


def show_error(e: Exception, what: str = "This view") -> None:
    """Bad input is an answer, not a crash: say what to change."""
    st.error(f"{what} cannot be simulated as set: {message(e)}", icon=":material/block:")


def overload(summary: dict, what: str = "This run") -> None:
    """A run whose queue grows without bound says so, with what was served against what was offered;
    a closed loop's, how its users offered the load and what saturates."""
    note = metrics.overload(summary)
    if note:
        st.warning(f"{what}: {note}.", icon=":material/trending_up:")
    clients(summary, what)


def clients(summary: dict, what: str = "This run") -> None:
    """A closed loop's users, what they sent and what stops more of them from raising throughput."""
    words = metrics.clients_words(summary)
    if words:
        st.info(f"{what}: {words}.", icon=":material/group:")
