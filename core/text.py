"""Numbers and sentences for people: durations, sizes, rates, ratios. One place, shared by the
Lab's reasoning, the tutorial, the command line and the views, so a figure reads the same everywhere."""
from __future__ import annotations

import math


def ms(x: float) -> str:
    """A duration given in ms, to three significant figures: ms below a second, then s, min, h."""
    if x >= 1000:
        return secs(x / 1e3)
    return f"{x:.3g} ms" if x >= 1 else f"{x:.2f} ms"


def fmt_ms(x: float) -> str:
    """A duration given in ms, as a headline shows it: whole ms below a second, then s, min, h."""
    return f"{x:.0f} ms" if x < 1000 else secs(x / 1e3)


def secs(x: float) -> str:
    """A duration given in s: ms below a second, then s, min, h."""
    if x < 1:
        return ms(x * 1e3)
    if x < 60:
        return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"
    if x < 3600:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.1f} h"


def gb(b: float) -> str:
    return f"{b / 1e9:,.1f} GB" if b >= 1e9 else f"{b / 1e6:,.0f} MB"


def mb(b: float) -> str:
    return f"{b / 1e6:,.1f} MB" if b < 1e9 else gb(b)


def per_token(b: float) -> str:
    if b >= 1024**2:
        return f"{b:,.0f} bytes ({b / 1024**2:.3g} MiB)"
    return f"{b:,.0f} bytes ({b / 1024:.3g} KiB)"


def toks(n: float, unit: str = "tokens") -> str:
    return f"{n:,.0f} {unit}"


def token_count(n: int) -> str:
    """A count of tokens as a card shows it, in at most 12 characters so that it fits the card's
    width: exact below ten thousand ('9,999 tokens'), then three figures ('12.3k tokens', '3.69M tokens',
    '1.20B tokens'; '3,694,592 tokens' was cut to '3,694,592 t...')."""
    if n < 9_999.5:
        return f"{n:,.0f} tokens"
    for scale, unit in ((1e3, "k"), (1e6, "M"), (1e9, "B")):
        x = n / scale
        if x < 999.5 or unit == "B":
            figures = f"{x:.2f}" if x < 9.995 else f"{x:.1f}" if x < 99.95 else f"{x:,.0f}"
            return f"{figures}{unit} tokens"


def tok_s(x: float) -> str:
    return f"{x:,.0f} tokens/s" if x >= 10 else f"{x:.1f} tokens/s"


def times(x: float) -> str:
    if x >= 10 or abs(x - round(x)) < 0.05:
        return f"{x:,.0f}×"
    return f"{x:.1f}×"


def usd(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.1 else f"${x:.3f}"


def share(ratio: float) -> str:
    """A value against its limit: a percentage, or a multiple once it is far past the limit."""
    return f"{ratio:.0%}" if ratio < 10 else f"{ratio:,.0f}x"


def in_sentence(name: str) -> str:
    """A name inside a sentence: lower case, but not its acronyms ("KV cache ...")."""
    return name if name[1:2].isupper() else name[:1].lower() + name[1:]


def sentence(s: str) -> str:
    """A sentence starts with a capital letter."""
    return s[:1].upper() + s[1:]


def count(n: int, noun: str) -> str:
    """'1 simulation', '12 simulations'."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def factor(x: float) -> str:
    """A ratio of at least 1 as people say it: '1.5×', '12×', '440×'."""
    return f"{x:.2g}×" if x < 10 else f"{x:,.0f}×"


def change_size(new: float, old: float, fewer: str = "lower", more: str = "higher") -> str:
    """How much new differs from old, in words: '440× faster', '12% lower', 'under 1% lower', 'up
    from zero'. Past 1.5 times it is a multiple, below it a percentage, so that no reading is ever
    '-100%', '+256308%' or '0% lower'."""
    if old <= 0 or new <= 0:  # no ratio to a zero: say where it went
        return "up from zero" if new > old else ("down to zero" if new < old else "unchanged")
    x = new / old
    word = fewer if x < 1 else more
    big = max(x, 1 / x)
    if big >= 1.5:
        return f"{factor(big)} {word}"
    return f"{abs(x - 1):.0%} {word}" if abs(x - 1) >= 0.005 else f"under 1% {word}"  # never '0% lower'


def change(new: float, old: float, show, fewer: str = "lower", more: str = "higher") -> str:
    """A comparison as a person says it: '6.9 s, down from 50 min (440× faster)'; 'unchanged at
    3.93 req/s' when the two read the same."""
    a, b = show(new), show(old)
    if a == b:
        return f"unchanged at {a}"
    if old <= 0 or new <= 0:  # '0.56 req/s, up from 0.00 req/s' says it all
        return f"{a}, {'down' if new < old else 'up'} from {b}"
    return f"{a}, {'down' if new < old else 'up'} from {b} ({change_size(new, old, fewer, more)})"


def against(error: float) -> str:
    """A simulated figure against the measured one, error = simulated / measured - 1, as a person says
    it: '4% higher', '8.1× lower', 'under 1% lower'; 'n/a' where there is no measurement to compare."""
    if not math.isfinite(error):
        return "n/a"
    return "the same" if error == 0 else change_size(1 + error, 1.0)
