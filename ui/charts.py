"""Altair charts of simulation results. Every axis carries its unit."""
from __future__ import annotations

import math
import textwrap

import altair as alt
import numpy as np
import pandas as pd

from core.lab.stages import OVERLOADED
from core.serving.simulate import SimResult

# Channels are always typed objects (alt.X, alt.Tooltip, ...): Altair resolves shorthand strings
# through a slow schema lookup, several milliseconds each, which would dominate a page's run.

# Streamlit's theme fits a chart's whole box (title, legend, axes) into its height, which squeezes
# the plot of a chart with a legend and clips a banded one: fit only the width, so that a chart's
# height is its plot's own.
FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")

# a limit line more than this many times the data's top is named above the chart, not drawn:
# drawn, it would squash the data into the bottom of the plot
FAR_LIMIT = 2.5
STAGE_NAMES = [f"stage {i}" for i in range(1, 6)]
STAGE_COLORS = ["#94a3b8", "#0ea5e9", "#7c3aed", "#f59e0b", "#dc2626"]  # one hue per stage, in order
COLORS = {"ok": "#16a34a", "warn": "#d97706", "bad": "#dc2626", "accent": "#7c3aed", "muted": "#9ca3af"}


# a chart's title on a phone (390 px, a chart 350 px wide) holds about 40 characters before Vega
# cuts it off ("...against b..."): a longer title is broken into lines of at most this many
TITLE_CHARS = 36


def title_lines(title: str) -> str | list[str]:
    """A title as one line, or as lines short enough not to be cut off on a phone."""
    lines = textwrap.wrap(title, TITLE_CHARS, break_long_words=False)
    return title if len(lines) <= 1 else lines


def framed(chart, height: int | alt.Step, title: str):
    """A chart's height (of its plot area, or a step per band) and title, its width the container's."""
    return chart.properties(height=height, title=title_lines(title), autosize=FIT_WIDTH)


def ticks_125(lo: float, hi: float) -> list[float]:
    """Round values at 1-2-5 steps from the largest at or below `lo` to the smallest at or above
    `hi` (a log axis reads best at these); decades only when that would crowd the axis."""
    if not (lo > 0 and hi > 0):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    out, e = [], math.floor(math.log10(lo)) - 1
    while not out or out[-1] < hi * (1 - 1e-9):
        for m in (1, 2, 5):
            v = m * 10.0 ** e
            if v <= lo * (1 + 1e-9):
                out = [v]
            elif not out or out[-1] < hi * (1 - 1e-9):
                out.append(v)
        e += 1
    out = [float(f"{v:.12g}") for v in out]
    return out if len(out) <= 9 else [v for v in out if f"{v:g}".lstrip("0.").startswith("1")] or out


def log_scale(values, ticks: list[float] | None = None, pad: float | None = None) -> tuple[alt.Scale, dict]:
    """A log scale spanning the data, with its ticks at 1-2-5 steps (or at `ticks`, say the powers
    of two a batch or a tensor-parallel degree takes); with `pad`, the data's range widened by that
    factor at each end (room for a point's symbol) rather than out to the ticks around it."""
    v = [float(x) for x in values if x is not None and np.isfinite(x) and x > 0]
    if not v:
        return alt.Scale(type="log"), {}
    lo, hi = (min(v), max(v)) if min(v) < max(v) else (min(v) / 2, max(v) * 2)
    t = sorted(ticks) if ticks else ticks_125(lo, hi)
    if pad:
        lo, hi = lo / pad, hi * pad
        inside = [x for x in t if lo <= x <= hi]
        return alt.Scale(type="log", domain=[lo, hi], nice=False), dict(values=inside or t, format=",~g")
    return alt.Scale(type="log", domain=[min(t[0], lo), max(t[-1], hi)], nice=False), dict(values=t, format=",~g")


def _thin(df: pd.DataFrame, n: int = 250) -> pd.DataFrame:
    return df if len(df) <= n else df.iloc[np.linspace(0, len(df) - 1, n).astype(int)]


def queue_and_batch(res: SimResult) -> alt.Chart:
    tr = res.trace
    df = pd.DataFrame({"time (s)": tr["time_s"], "waiting in queue": tr["waiting"], "running batch": tr["running"]})
    df = _thin(df).melt("time (s)", var_name="requests", value_name="count")
    chart = alt.Chart(df).mark_line(interpolate="step-after").encode(
        x=alt.X("time (s):Q", title="simulated time (s)"),
        y=alt.Y("count:Q", title="requests (all replicas)", axis=alt.Axis(format="d", tickMinStep=1)),
        color=alt.Color("requests:N", scale=alt.Scale(domain=["running batch", "waiting in queue"],
                                                      range=[COLORS["accent"], COLORS["bad"]]),
                        legend=alt.Legend(orient="top", title=None)),
        tooltip=[alt.Tooltip("time (s):Q"), alt.Tooltip("requests:N"), alt.Tooltip("count:Q")],
    )
    return framed(chart, 200, "Queue and running batch over time")


def kv_blocks(res: SimResult) -> alt.Chart:
    tr = res.trace
    cap = res.summary["kv_blocks_total"]
    df = _thin(pd.DataFrame({"time (s)": tr["time_s"], "blocks used": tr["kv_blocks_used"]}))
    top = float(df["blocks used"].max()) if len(df) else 0.0
    far = top * FAR_LIMIT < cap
    area = alt.Chart(df).mark_area(opacity=0.5, color=COLORS["accent"], interpolate="step-after").encode(
        x=alt.X("time (s):Q", title="simulated time (s)"),
        y=alt.Y("blocks used:Q", title=f"KV blocks ({res.config.block_size} tokens each)",
                scale=alt.Scale(domain=[0, max(top, 1) * 1.1] if far else [0, cap * 1.05]),
                axis=alt.Axis(format=",d", tickMinStep=1)),
        tooltip=[alt.Tooltip("time (s):Q"), alt.Tooltip("blocks used:Q")])
    text = f"capacity {cap:,} blocks" + (f", above the chart (peak {share_of(top, cap)} of it)" if far else "")
    label = alt.Chart(pd.DataFrame({"text": [text]})).mark_text(align="left", baseline="top", dy=4,
                                                                color=COLORS["bad"]).encode(
        text=alt.Text("text:N"), x=alt.XValue(4), y=alt.YValue(0))
    if far:
        return framed(area + label, 200, "KV blocks used against capacity")
    rule = alt.Chart(pd.DataFrame({"capacity": [cap]})).mark_rule(color=COLORS["bad"], strokeDash=[6, 4]).encode(
        y=alt.Y("capacity:Q"), tooltip=[alt.Tooltip("capacity:Q", title="KV blocks in all")])
    label = alt.Chart(pd.DataFrame({"capacity": [cap], "text": [text]})).mark_text(
        align="left", dy=-6, color=COLORS["bad"]).encode(y=alt.Y("capacity:Q"), text=alt.Text("text:N"), x=alt.XValue(4))
    return framed(area + rule + label, 200, "KV blocks used against capacity")


def share_of(part: float, whole: float) -> str:
    r = part / whole if whole else 0.0
    return f"{r:.1%}" if r < 0.1 else f"{r:.0%}"


def ttft_cdf(res: SimResult, target_ms: float) -> alt.Chart:
    q = res.requests
    ttft = np.sort((q["first_token_s"] - q["arrival_s"]) * 1e3)
    frac = np.arange(1, len(ttft) + 1) / len(ttft)
    df = _thin(pd.DataFrame({"TTFT (ms)": np.maximum(ttft, 1e-3), "share of requests": frac}))
    scale, axis = log_scale(list(df["TTFT (ms)"]) + [target_ms])
    line = alt.Chart(df).mark_line(color=COLORS["accent"], interpolate="step-after").encode(
        x=alt.X("TTFT (ms):Q", title="time to first token (ms, log scale)", scale=scale, axis=alt.Axis(**axis)),
        y=alt.Y("share of requests:Q", title="share of requests at or below", axis=alt.Axis(format="%")),
        tooltip=[alt.Tooltip("TTFT (ms):Q", format=".1f"), alt.Tooltip("share of requests:Q", format=".1%")])
    t = pd.DataFrame({"target": [target_ms], "text": [f"p99 target {target_ms:g} ms"]})
    rule = alt.Chart(t).mark_rule(color=COLORS["bad"], strokeDash=[6, 4]).encode(x=alt.X("target:Q"))
    text = alt.Chart(t).mark_text(align="left", dx=4, dy=-80, color=COLORS["bad"]).encode(
        x=alt.X("target:Q"), text=alt.Text("text:N"))
    p99 = alt.Chart(pd.DataFrame({"y": [0.99]})).mark_rule(color=COLORS["muted"], strokeDash=[2, 2]).encode(
        y=alt.Y("y:Q"))
    return framed(line + rule + text + p99, 200, "Time-to-first-token distribution (CDF)")


def memory_split(rows: list[dict]) -> alt.Chart:
    df = pd.DataFrame(rows)
    order = ["weights", "KV cache", "workspace", "unused"]
    df["order"] = df["part"].map(order.index)
    chart = alt.Chart(df).mark_bar(size=34).encode(
        y=alt.Y("pool:N", title=None),
        x=alt.X("gb:Q", title="memory per GPU (GB)", stack="zero"),
        color=alt.Color("part:N", sort=order, title=None, legend=alt.Legend(orient="top"),
                        scale=alt.Scale(domain=order, range=["#475569", COLORS["accent"], "#f59e0b", "#e5e7eb"])),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("pool:N"), alt.Tooltip("part:N"), alt.Tooltip("gb:Q", format=".1f", title="GB")],
    )
    return framed(chart, alt.Step(44), "Per-GPU memory split")


def token_timeline(res: SimResult, max_requests: int = 4, max_ticks: int = 120) -> alt.Chart:
    """What a streaming client sees: each sampled request's tokens after its arrival (at most
    max_ticks of them drawn per request, evenly spread, the first always)."""
    st_ = res.stream
    rows, ends = [], []
    for k, req in enumerate(st_["request"][:max_requests]):
        times = st_["token_s"][k]
        times = times[~np.isnan(times)]
        arrival = st_["arrival_s"][k]
        label = f"request {int(req)}"
        picks = np.unique(np.linspace(0, len(times) - 1, min(len(times), max_ticks)).astype(int)) if len(times) else []
        for i in picks:
            rows.append(dict(request=label, t=(times[i] - arrival) * 1e3, token=int(i) + 1,
                             kind="first token" if i == 0 else "token"))
        if len(times):
            ends.append(dict(request=label, t0=0.0, t1=(times[-1] - arrival) * 1e3))
    df, span = pd.DataFrame(rows), pd.DataFrame(ends)
    if df.empty:
        return alt.Chart(pd.DataFrame({"x": []})).mark_point()
    bar = alt.Chart(span).mark_rule(color=COLORS["muted"], strokeWidth=6, opacity=0.35).encode(
        y=alt.Y("request:N", title=None), x=alt.X("t0:Q"), x2=alt.X2("t1:Q"),
        tooltip=[alt.Tooltip("t1:Q", title="whole answer after (ms)", format=",.0f")])
    ticks = alt.Chart(df).mark_tick(thickness=1.5, size=14).encode(
        y=alt.Y("request:N"), x=alt.X("t:Q", title="time since the request arrived (ms)"),
        color=alt.Color("kind:N", scale=alt.Scale(domain=["first token", "token"],
                                                  range=[COLORS["bad"], COLORS["accent"]]),
                        legend=alt.Legend(orient="top", title=None)),
        tooltip=[alt.Tooltip("request:N"), alt.Tooltip("token:Q"),
                 alt.Tooltip("t:Q", title="ms after arrival", format=",.1f")])
    return framed(bar + ticks, alt.Step(34), "Token timeline: what a streaming client sees (grey: the whole answer)")


def stage_bars(rows: list[dict], metric: str, title: str, unit: str, target: float | None = None,
               log: bool = False) -> alt.Chart:
    """One bar per stage, coloured by whether it meets the targets; a stage that cannot run on
    this workload is named on the axis and marked "cannot run"."""
    df = pd.DataFrame(rows)
    ran = df[metric].dropna()
    base = float(ran.min()) / 4 if log and len(ran) else 0.0  # log bars need a floor above zero
    df["label"] = ["" if pd.notna(v) else "cannot run" for v in df[metric]]
    df[metric] = df[metric].fillna(base)
    df["base"] = base
    x = alt.X("stage:N", title=None, sort=None, axis=alt.Axis(labelAngle=0))
    scale, axis = log_scale(list(df[metric]) + [base] + ([target] if target else [])) if log else (alt.Scale(), {})
    bars = alt.Chart(df).mark_bar().encode(
        x=x, y=alt.Y(f"{metric}:Q", title=f"{title} ({unit})", scale=scale, axis=alt.Axis(**axis)),
        y2=alt.Y2("base:Q"),
        color=alt.Color("meets:N", scale=alt.Scale(domain=["meets", "misses", OVERLOADED, "cannot run here"],
                                                   range=[COLORS["ok"], COLORS["bad"], "#7f1d1d", COLORS["muted"]]),
                        legend=alt.Legend(orient="top", title=None, columns=2)),  # four entries: one row ran off a phone
        tooltip=[alt.Tooltip("stage:N"), alt.Tooltip("name:N", title="design"),
                 alt.Tooltip(f"{metric}:Q", format=",.3g", title=f"{title} ({unit})")])
    # on two lines: side by side on a phone, two one-line labels ran into each other
    missing = alt.Chart(df).mark_text(baseline="bottom", dy=-3, lineBreak=" ", color=COLORS["muted"]).encode(
        x=x, y=alt.Y("base:Q"), text=alt.Text("label:N"))
    layers = [bars, missing]
    if target:
        layers.append(alt.Chart(pd.DataFrame({"t": [target]})).mark_rule(color=COLORS["bad"], strokeDash=[6, 4])
                      .encode(y=alt.Y("t:Q")))
    return framed(alt.layer(*layers), 200, title)


def stage_path(rows: list[dict]) -> alt.Chart:
    """The recommended stage of each scenario card, in path order."""
    df = pd.DataFrame(rows)
    chart = alt.Chart(df).mark_line(point=alt.OverlayMarkDef(size=80), interpolate="step-after",
                                    color=COLORS["accent"]).encode(
        # the cards' numbers: six names side by side did not fit a phone, which dropped every other one
        x=alt.X("card:N", sort=None, title="scenario card, numbered as above",
                axis=alt.Axis(labelAngle=0, labelExpr="split(datum.label, '.')[0]")),
        y=alt.Y("stage:Q", title="recommended stage", scale=alt.Scale(domain=[0.5, 5.5]),
                axis=alt.Axis(values=[1, 2, 3, 4, 5], format="d")),
        tooltip=[alt.Tooltip("card:N"), alt.Tooltip("stage:Q"), alt.Tooltip("name:N", title="design")],
    )
    return framed(chart, 180, "The recommended stage along the path never goes back")


def line(rows: list[dict], x: str, y: str, x_title: str, y_title: str, title: str, log_x: bool = False,
         log_y: bool = False, rule_y: float | None = None, rule_x: float | None = None, color: str | None = None,
         percent_y: bool = False, x_ticks: list[float] | None = None, rule_y_label: str | None = None,
         integer_y: bool = False, mark_overload: bool = False) -> alt.Chart:
    """A swept figure against its input. A log axis ticks at 1-2-5 steps (or at `x_ticks`); a
    limit (rule_y, in words `rule_y_label`) far above the data is named above the chart instead of
    squashing the data. With mark_overload, the points whose queue grows without bound (rows with
    stable False) are red: their figure grows with the run's length."""
    df = pd.DataFrame(rows)
    top = float(df[y].max()) if len(df) else 0.0
    far = rule_y is not None and not log_y and top * FAR_LIMIT < rule_y
    fmt = "%" if percent_y else (",d" if integer_y else None)
    y_axis = dict(format=fmt) if fmt else {}
    if integer_y:
        y_axis["tickMinStep"] = 1
    if log_y:
        y_scale, y_axis = log_scale(list(df[y]) + ([rule_y] if rule_y else []))
    else:
        y_scale = alt.Scale(domain=[0, top * 1.1]) if far else alt.Scale()
    if log_x:
        x_scale, x_axis = log_scale(list(df[x]) + ([rule_x] if rule_x else []), x_ticks)
    else:
        x_scale, x_axis = alt.Scale(), {}
    enc_y = alt.Y(f"{y}:Q", title=y_title, scale=y_scale, axis=alt.Axis(**y_axis))
    base = alt.Chart(df).mark_line(point=True, color=color or COLORS["accent"]).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=x_scale, axis=alt.Axis(**x_axis)), y=enc_y,
        tooltip=[alt.Tooltip(f"{x}:Q", title=x_title, format=",.3g"), alt.Tooltip(f"{y}:Q", title=y_title, format=",.3g")])
    layers = [base]
    if mark_overload and "stable" in df and not df["stable"].all():
        layers.append(alt.Chart(df[~df["stable"].astype(bool)]).mark_point(filled=True, size=70, color=COLORS["bad"])
                      .encode(x=alt.X(f"{x}:Q"), y=alt.Y(f"{y}:Q"),
                              tooltip=[alt.Tooltip(f"{x}:Q", title=x_title, format=",.3g"),
                                       alt.Tooltip(f"{y}:Q", title=f"{y_title}, growing with the run", format=",.3g")]))
    if rule_y is not None:
        label = rule_y_label or (f"limit {rule_y:.0%}" if percent_y else f"limit {rule_y:,.4g}")
        if far:
            layers.append(alt.Chart(pd.DataFrame({"text": [f"{label}: far above the chart"]}))
                          .mark_text(align="right", baseline="top", dy=2, color=COLORS["bad"])
                          .encode(text=alt.Text("text:N"), x=alt.XValue("width"), y=alt.YValue(0)))
        else:
            layers.append(alt.Chart(pd.DataFrame({"v": [rule_y]})).mark_rule(color=COLORS["bad"], strokeDash=[6, 4])
                          .encode(y=alt.Y("v:Q"), tooltip=[alt.Tooltip("v:Q", title=label)]))
    if rule_x is not None:
        layers.append(alt.Chart(pd.DataFrame({"v": [rule_x]})).mark_rule(color=COLORS["muted"], strokeDash=[2, 2])
                      .encode(x=alt.X("v:Q")))
    return framed(alt.layer(*layers), 200, title)


def decode_roofline(rows: list[dict], roof: list[dict], ridges: dict[str, float]) -> alt.Chart:
    """Decode tokens/s against batch: the Lab's cost model (rows) under the weights-only roofline,
    with a dotted line at each ridge batch (say the datasheet's and the measured one), labelled
    with its name and batch."""
    df = pd.DataFrame([dict(batch=r["batch"], tok_s=r["tok_s"], curve="Lab cost model") for r in rows]
                      + [dict(batch=r["batch"], tok_s=r["tok_s"], curve="roofline, weights only") for r in roof])
    xs, xa = log_scale(list(df["batch"]) + list(ridges.values()), sorted({r["batch"] for r in rows}))
    ys, ya = log_scale(df["tok_s"])
    lines = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("batch:Q", title="decode batch (sequences, log scale)", scale=xs, axis=alt.Axis(**xa)),
        y=alt.Y("tok_s:Q", title="tokens/s (log scale)", scale=ys, axis=alt.Axis(**ya)),
        color=alt.Color("curve:N", scale=alt.Scale(domain=["Lab cost model", "roofline, weights only"],
                                                   range=[COLORS["accent"], COLORS["muted"]]),
                        legend=alt.Legend(orient="top", title=None, symbolType="stroke", symbolStrokeWidth=3)),
        strokeDash=alt.StrokeDash("curve:N", legend=None, scale=alt.Scale(range=[[1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("batch:Q", title="batch (sequences)"), "curve:N",
                 alt.Tooltip("tok_s:Q", title="tokens/s", format=",.0f")])
    chart = lines
    # labels run up their lines from the plot's foot, below the curves (tokens/s grow with the batch, so
    # the lower right is empty): the lowest ridge's on the left of its line, the others' on the right,
    # so that two close ridges' labels face away from each other
    for i, (name, batch) in enumerate(sorted(ridges.items(), key=lambda kv: kv[1])):
        ridge = pd.DataFrame({"batch": [batch], "text": [f"{name}: {batch:,.0f}"]})
        chart += alt.Chart(ridge).mark_rule(color=COLORS["bad"], strokeDash=[2, 2]).encode(x="batch:Q")
        chart += alt.Chart(ridge).mark_text(angle=270, align="left", baseline="bottom" if i == 0 else "top", dx=4,
                                            dy=-3 if i == 0 else 3, color=COLORS["bad"]).encode(
            x="batch:Q", y=alt.YValue("height"), text="text:N")
    return framed(chart, 260, "Decode throughput of one replica against batch size")


def tp_memory(rows: list[dict]) -> alt.Chart:
    """Per-GPU memory against the tensor-parallel degree: weights shrink, the KV cache gets the rest."""
    df = pd.DataFrame([dict(tp=str(r["tp"]), part=p, gb=r[k]) for r in rows
                       for p, k in (("weights", "weights_gb"), ("KV cache", "kv_gb"))])
    bars = alt.Chart(df).mark_bar().encode(
        x=alt.X("tp:O", title="tensor-parallel degree (GPUs per replica)", sort=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("gb:Q", title="memory per GPU (GB)", stack="zero"),
        color=alt.Color("part:N", scale=alt.Scale(domain=["weights", "KV cache"],
                                                  range=["#475569", COLORS["accent"]]),
                        legend=alt.Legend(orient="top", title=None)),
        order=alt.Order("part:N", sort="descending"),
        tooltip=["tp:O", "part:N", alt.Tooltip("gb:Q", title="GB per GPU", format=",.1f")])
    usable = pd.DataFrame({"gb": [rows[0]["usable_gb"]], "text": [f"usable {rows[0]['usable_gb']:.0f} GB per GPU"]})
    rule = alt.Chart(usable).mark_rule(color=COLORS["bad"], strokeDash=[6, 4]).encode(y="gb:Q")
    label = alt.Chart(usable).mark_text(align="right", dy=-6, color=COLORS["bad"]).encode(
        x=alt.value("width"), y="gb:Q", text="text:N")
    return framed(bars + rule + label, 230, "What one GPU holds as the model is sharded")


def frontier(rows: list[dict], metric: str, title: str, target: float) -> alt.Chart:
    """Cost against one latency percentile for every searched deployment (its cheapest passing size,
    or its nearest miss), the frontier drawn as a line, the target dashed."""
    df = pd.DataFrame([dict(usd_h=r["usd_per_hour"], ms=r[metric], label=r["deployment"],
                            stage=f"stage {r['stage']}", kind="frontier" if r["frontier"] else
                            ("meets the targets" if r["meets"] else "misses"),
                            rate=r["max_rate_req_s"] or 0.0) for r in rows if np.isfinite(r[metric])])
    # both axes fitted to the points, with room for a symbol at each end: the domain ran to the next tick
    # (10^6 ms above a 2x10^5 miss), and the costliest shapes sat on the frame's right edge
    lo, hi = float(df["usd_h"].min()), float(df["usd_h"].max())
    room = 0.05 * (hi - lo if hi > lo else max(hi, 1.0))
    x = alt.X("usd_h:Q", title="cost ($ per hour)",
              scale=alt.Scale(domain=[max(lo - room, 0.0), hi + room], nice=False))
    scale, axis = log_scale(list(df["ms"]) + [target], pad=1.3)
    y = alt.Y("ms:Q", title=f"{title} (ms, log scale)", scale=scale, axis=alt.Axis(**axis))
    tooltip = [alt.Tooltip("label:N", title="deployment"), alt.Tooltip("usd_h:Q", title="$ per hour", format=",.2f"),
               alt.Tooltip("ms:Q", title=f"{title} (ms)", format=",.1f"),
               alt.Tooltip("rate:Q", title="highest rate within targets (req/s)", format=",.3g")]
    points = alt.Chart(df).mark_point(filled=True, size=70).encode(
        x=x, y=y, tooltip=tooltip,
        color=alt.Color("stage:N", scale=alt.Scale(domain=STAGE_NAMES, range=STAGE_COLORS),
                        # 'stage' once, then 1-5: five 'stage N' entries ran off a phone ('stage 4 ●')
                        legend=alt.Legend(orient="bottom", title="stage", titleOrient="left", columns=5,
                                          labelExpr="replace(datum.label, 'stage ', '')")),
        shape=alt.Shape("kind:N", scale=alt.Scale(domain=["frontier", "meets the targets", "misses"],
                                                  range=["diamond", "circle", "cross"]),
                        # above the chart: beside the stage legend below it, it ran off a half-width chart
                        legend=alt.Legend(orient="top", title=None, columns=3)))
    line = alt.Chart(df[df["kind"] == "frontier"].sort_values("usd_h")).mark_line(
        color=COLORS["accent"], interpolate="step-after").encode(x=x, y=y)
    # the same scale as the points: the rule's own (a "nice" log scale) widened the shared one to whole decades
    rule = alt.Chart(pd.DataFrame({"ms": [target]})).mark_rule(color=COLORS["bad"], strokeDash=[6, 4]).encode(y=y)
    return framed(line + points + rule, 260, f"{title} against cost")




def interactivity(rows: list[dict], tpot_target_ms: float, title: str = "Throughput against interactivity") -> alt.Chart:
    """Output tok/s per GPU against tok/s per user, one line per deployment (rows carry a
    'deployment' and each level's 'users'), one point per concurrency level; the knee ringed and
    named (beside it, or in the legend where there are several deployments), the TPOT target as the
    tok/s per user it allows (dashed: right of it meets the target)."""
    df = pd.DataFrame(rows)
    if "deployment" not in df:
        df["deployment"] = "this deployment"
    several = df["deployment"].nunique() > 1
    if several:  # each deployment's knee in its legend entry: near knees' labels on the plot overprint
        at = df[df["knee"].astype(bool)].groupby("deployment")["users"].first()
        df["deployment"] = df["deployment"].map(lambda d: f"{d} · knee at {at[d]:,} users" if d in at else d)
    xs, xa = log_scale(list(df["tok_s_per_user"]) + [1e3 / tpot_target_ms])
    ys, ya = log_scale(df["output_tok_s_per_gpu"])
    x = alt.X("tok_s_per_user:Q", title="tokens/s per user (1000 / median TPOT ms, log scale)", scale=xs,
              axis=alt.Axis(**xa))
    y = alt.Y("output_tok_s_per_gpu:Q", title="output tokens/s per GPU (log scale)", scale=ys, axis=alt.Axis(**ya))
    names = list(dict.fromkeys(df["deployment"]))
    palette = [COLORS["accent"], "#0ea5e9", "#f59e0b", "#16a34a"]
    color = alt.Color("deployment:N", scale=alt.Scale(domain=names, range=palette[:len(names)] or palette),
                      legend=alt.Legend(orient="top", title=None, columns=1, labelLimit=520) if len(names) > 1 else None)
    tooltip = [alt.Tooltip("deployment:N"), alt.Tooltip("users:Q", title="concurrent users", format=",d"),
               alt.Tooltip("output_tok_s_per_gpu:Q", title="output tok/s per GPU", format=",.0f"),
               alt.Tooltip("tok_s_per_user:Q", title="tok/s per user", format=",.1f"),
               alt.Tooltip("ttft_p50_ms:Q", title="TTFT median (ms)", format=",.0f"),
               alt.Tooltip("ttft_p99_ms:Q", title="TTFT p99 (ms)", format=",.0f"),
               alt.Tooltip("tpot_p99_ms:Q", title="TPOT p99 (ms)", format=",.1f")]
    curve = alt.Chart(df).mark_line(point=True).encode(x=x, y=y, color=color, order=alt.Order("users:Q"),
                                                      tooltip=tooltip)
    knees = df[df["knee"].astype(bool)].assign(text=lambda d: "knee: " + d["users"].map("{:,}".format) + " users")
    ring = alt.Chart(knees).mark_point(size=260, strokeWidth=2, color=COLORS["bad"]).encode(x=x, y=y, tooltip=tooltip)
    layers = curve + ring
    if not several:  # one deployment: its knee named beside the ring
        layers += alt.Chart(knees).mark_text(align="left", dx=12, dy=-12, color=COLORS["bad"]).encode(
            x=x, y=y, text="text:N")
    slo = pd.DataFrame({"v": [1e3 / tpot_target_ms], "text": [f"TPOT target {tpot_target_ms:g} ms"]})
    rule = alt.Chart(slo).mark_rule(color=COLORS["bad"], strokeDash=[6, 4]).encode(
        x=alt.X("v:Q"), tooltip=[alt.Tooltip("text:N", title="target")])
    rule_text = alt.Chart(slo).mark_text(angle=270, align="right", baseline="bottom", dx=-4, dy=-3,
                                         color=COLORS["bad"]).encode(x="v:Q", y=alt.YValue(0), text="text:N")
    return framed(layers + rule + rule_text, 280, title)
