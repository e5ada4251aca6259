"""Typed plugin parameters with defaults and strict parsing.

Each plugin class declares ``PARAMS``: a tuple of :class:`Param` (the YAML key in camelCase as
upstream spells it, its type, default, bounds or choices and a one-line description).
:func:`parse_params` turns a YAML mapping into a complete ``{key: value}`` dict or raises
:class:`ConfigError` naming the plugin and the offending key.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A scheduling config (profiles file) is invalid; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Param:
    key: str
    kind: type  # float, int, bool or str
    default: Any
    doc: str
    lo: float | None = None  # inclusive lower bound
    hi: float | None = None  # inclusive upper bound
    lo_open: bool = False  # lower bound exclusive
    choices: tuple[str, ...] | None = None

    def describe_range(self) -> str:
        if self.choices:
            return " | ".join(self.choices)
        if self.lo is None and self.hi is None:
            return ""
        lo = "" if self.lo is None else f"{'>' if self.lo_open else '>='} {self.lo:g}"
        hi = "" if self.hi is None else f"<= {self.hi:g}"
        return ", ".join(x for x in (lo, hi) if x)


def _where(plugin_type: str, name: str) -> str:
    return f"plugin '{name}' ({plugin_type})" if name != plugin_type else f"plugin '{name}'"


def coerce(p: Param, value: Any, where: str) -> Any:
    """Check and convert one value; raises ConfigError naming ``where`` and the key."""
    bad = f"{where}: parameter '{p.key}'"
    if p.kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{bad} must be true or false, got {value!r}")
        return value
    if p.kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{bad} must be a string, got {value!r}")
        if p.choices and value not in p.choices:
            raise ConfigError(f"{bad} must be one of {', '.join(p.choices)}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{bad} must be a number, got {value!r}")
    if p.kind is int:
        if not isinstance(value, int):
            raise ConfigError(f"{bad} must be an integer, got {value!r}")
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{bad} must be finite, got {value!r}")
    if p.lo is not None and (value <= p.lo if p.lo_open else value < p.lo):
        raise ConfigError(f"{bad} must be {p.describe_range()}, got {value!r}")
    if p.hi is not None and value > p.hi:
        raise ConfigError(f"{bad} must be {p.describe_range()}, got {value!r}")
    return value


def parse_params(
    plugin_type: str, name: str, params: Sequence[Param], raw: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Defaults overlaid with ``raw``; unknown keys and bad values raise ConfigError."""
    where = _where(plugin_type, name)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: 'parameters' must be a mapping, got {raw!r}")
    known = {p.key: p for p in params}
    for key in raw:
        if key not in known:
            hint = f" (known: {', '.join(known)})" if known else " (it takes no parameters)"
            raise ConfigError(f"{where}: unknown parameter '{key}'{hint}")
    return {p.key: coerce(p, raw[p.key], where) if p.key in raw else p.default for p in params}
