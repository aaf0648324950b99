"""One boundary for every input a person gives: the sidebar, a link and the command line check
their numbers and choices here, against one table (core/data/bounds.json).

A number must be finite and inside its documented range, a whole number where the input counts
something, a choice one of the known ones. A violation is one sentence that names the input, the
value and the range, e.g. "request rate must be a number from 0.001 to 100,000 req/s, not inf".
"""
from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

_DATA = json.loads((Path(__file__).parent / "data" / "bounds.json").read_text())
TABLE: dict[str, dict] = _DATA["inputs"]


class DataError(ValueError):
    """Uploaded or linked data that cannot be used: its message may quote that data, so a page
    shows it as plain text (never as Markdown, HTML or a link)."""


def _fmt(v) -> str:
    v = float(v)
    return f"{int(v):,}" if v.is_integer() and abs(v) < 1e15 else f"{v:g}"


def describe(name: str) -> str:
    """'a number from 0.001 to 100,000 req/s' (the range, for messages and help texts)."""
    s = TABLE[name]
    kind = "a whole number" if s["type"] == "int" else "a number"
    unit = f" {s['unit']}" if s["unit"] else ""
    return f"{kind} from {_fmt(s['min'])} to {_fmt(s['max'])}{unit}"


def _refuse(name: str, shown: str, label: str | None) -> ValueError:
    return ValueError(f"{label or TABLE[name]['what']} must be {describe(name)}, not {shown}")


def _shown(value) -> str:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _fmt(value) if math.isfinite(value) else str(float(value))
    text = str(value)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def check(name: str, value, label: str | None = None):
    """`value` when it is inside the range of input `name`; else ValueError saying so. A whole
    number is returned as an int, any other as a float."""
    s = TABLE[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _refuse(name, _shown(value), label)
    if s["type"] == "int":
        if not isinstance(value, numbers.Integral) and not (math.isfinite(value) and float(value).is_integer()):
            raise _refuse(name, _shown(value), label)
        if isinstance(value, numbers.Integral) or abs(value) < 2**63:
            value = int(value)
    elif not math.isfinite(value):
        raise _refuse(name, _shown(value), label)
    if not s["min"] <= value <= s["max"]:
        raise _refuse(name, _shown(value), label)
    return value if s["type"] == "int" else float(value)


def parse(name: str, text: str, label: str | None = None):
    """Text (a command-line argument, a link's parameter, a CSV field) read as input `name` and checked."""
    raw = str(text).strip()
    try:
        value = int(raw) if TABLE[name]["type"] == "int" else float(raw)
    except (ValueError, OverflowError):
        try:  # a whole number written as 1e3 or 512.0
            as_float = float(raw)
        except ValueError:
            raise _refuse(name, _shown(text), label) from None
        value = as_float
    return check(name, value, label)


def choice(what: str, value, choices) -> str:
    """`value` when it is one of `choices`; else one sentence naming them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(str, choices))}, not {_shown(value)}")
    return value


def sidebar_options(name: str) -> list:
    """The values the sidebar offers for input `name` (a select slider's steps)."""
    return list(TABLE[name]["sidebar"]["options"])


def sidebar_range(name: str) -> tuple:
    """(min, max) of the sidebar's widget for input `name` (a slider or a number field)."""
    s = TABLE[name]["sidebar"]
    return s["min"], s["max"]
