"""`headroom settings`: every service's settings as Markdown tables (env name, default, meaning).

README.md embeds this output; a test keeps the two in step."""

from __future__ import annotations

import importlib
import inspect

from pydantic.fields import FieldInfo

from shared.settings import CommonSettings

SERVICES = ("gateway", "predictor", "trainer", "collector", "simulator")


def settings_class(service: str) -> type[CommonSettings]:
    module = importlib.import_module(f"services.{service}.settings")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, CommonSettings)
        and c is not CommonSettings
        and c.__module__ == module.__name__
    ]
    if len(classes) != 1:
        raise RuntimeError(f"services/{service}/settings.py must define one settings class")
    return classes[0]


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "(computed)"
    d = info.default
    if isinstance(d, bool):
        return str(d).lower()
    return "" if d is None else str(d)


def markdown(service: str) -> str:
    cls = settings_class(service)
    prefix = cls.model_config["env_prefix"].upper()
    rows = [f"**{service}** (`{prefix}*`)", "", "| variable | default | meaning |", "|---|---|---|"]
    for name, info in cls.model_fields.items():
        if name in CommonSettings.model_fields:
            continue
        desc = (info.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{prefix}{name.upper()}` | `{_default(info)}` | {desc} |")
    return "\n".join(rows)


def main() -> int:
    print("\n\n".join(markdown(s) for s in SERVICES))
    return 0
