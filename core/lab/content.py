"""The Lab's teaching data, read from data/: stage notes, scenario cards, rules with their
citations, and the component path."""
from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache

from .. import DATA
from ..physics import catalog
from ..text import fmt_ms
from .inputs import LabInputs



@lru_cache(maxsize=None)
def _data(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def stage_notes() -> dict[int, dict]:
    return {s["stage"]: s for s in _data("stages.json")["stages"]}


def scenarios() -> list[dict]:
    return _data("scenarios.json")["scenarios"]


def rules() -> dict[str, dict]:
    return {r["id"]: r for r in _data("rules.json")["rules"]}


def components() -> list[dict]:
    return _data("components.json")["components"]


def tradeoffs() -> list[dict]:
    return _data("tradeoffs.json")["tradeoffs"]


def scenario_inputs(scenario: dict, base: LabInputs | None = None) -> LabInputs:
    """A scenario card's inputs over the Lab's defaults (or over `base`)."""
    return replace(base or LabInputs(), **scenario["inputs"])


def cite(rule: dict) -> str:
    """'Kwon et al., SOSP 2023': a rule's citation, short."""
    c = rule["citation"]
    authors = c["authors"]
    if len(authors) == 1:
        who = authors[0]
    elif len(authors) == 2:
        who = " and ".join(a.split()[-1] for a in authors)
    else:
        who = f"{authors[0].split()[-1]} et al."
    return f"{who}, {c['venue']} {c['year']}"


def full_citation(c: dict) -> str:
    """Authors. [Title](link). *Venue*, year."""
    return f"{', '.join(c['authors'])}. [{c['title']}]({c['link']}). *{c['venue']}*, {c['year']}."


def describe_workload(x: LabInputs) -> str:
    """A workload in one line: model, GPUs, load, lengths and targets."""
    return (f"{catalog.get_model(x.model).name} on {x.gpus} × {catalog.get_gpu(x.gpu).name}, {x.load_label()}, "
            f"{x.prompt_tokens:,} prompt / {x.output_tokens:,} output tokens ({x.length_dist}), "
            f"targets p99 TTFT {fmt_ms(x.ttft_p99_ms)}, p99 TPOT {fmt_ms(x.tpot_ms)}")


def card_lines(x: dict) -> str:
    """A scenario card's workload, in three short lines (Markdown line breaks)."""
    return (f"{x['rate']:g} req/s · {x['prompt_tokens']:,} in / {x['output_tokens']:,} out tokens  \n"
            f"{catalog.get_model(x['model']).name} on {x['gpus']} x {x['gpu'].upper()}  \n"
            f"p99 TTFT target {fmt_ms(x['ttft_p99_ms'])}")
