"""YAML text of plain data (a Kubernetes manifest, an engine's options file) without a YAML library:
strings are quoted as JSON, which YAML reads."""
from __future__ import annotations

import json


def to_yaml(value, indent: int = 0) -> str:
    """YAML of plain dicts, lists, strings and numbers (strings quoted as JSON, which YAML reads)."""
    pad = "  " * indent
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            key = json.dumps(k) if any(c in k for c in ":./") else k
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:\n{to_yaml(v, indent + 1)}")
            else:
                out.append(f"{pad}{key}: {_scalar(v)}\n")
        return "".join(out)
    if isinstance(value, list):
        out = []
        for v in value:
            if isinstance(v, (dict, list)) and v:
                body = to_yaml(v, indent + 1)
                out.append(f"{pad}- {body.lstrip()}")
            else:
                out.append(f"{pad}- {_scalar(v)}\n")
        return "".join(out)
    return f"{pad}{_scalar(value)}\n"


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (dict, list)):
        return "{}" if isinstance(v, dict) else "[]"
    return json.dumps(str(v))
