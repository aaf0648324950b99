"""What every command shares: a parser whose errors are one line, the argument types, and output
as text or JSON."""
from __future__ import annotations

import argparse
import json
import sys

from .. import bounds


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (argparse prints usage + message otherwise)
        raise UsageError(f"{self.prog}: {message}")


class UsageError(Exception):
    pass


def bounded(name: str):
    """The argument type of input `name` of the one table of ranges (core/bounds.py): finite,
    inside its range, whole where it counts something."""
    def parse(text: str):
        try:
            return bounds.parse(name, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = name  # argparse names the type in some messages
    return parse


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
