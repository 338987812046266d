"""Strict JSON: one document, no NaN/Infinity (they are null in ``to_dict``)."""

from __future__ import annotations

import json
from typing import Any


def dumps(doc: dict[str, Any], *, indent: int | None = 2) -> str:
    return json.dumps(doc, allow_nan=False, indent=indent, ensure_ascii=False)
