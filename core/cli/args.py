"""What every command shares: a parser whose errors are one line, the argument types, and output
as text or JSON."""
from __future__ import annotations

import argparse
import json
import sys


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (argparse prints usage + message otherwise)
        raise UsageError(f"{self.prog}: {message}")


class UsageError(Exception):
    pass


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must not be negative")
    return v


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None


def emit(result: dict, as_json: bool, lines: list[str]) -> None:
    if as_json:
        json.dump(result, sys.stdout, indent=1, default=jsonable)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n".join(lines) + "\n")


def jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"cannot write {type(o).__name__} as JSON")
