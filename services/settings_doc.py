"""`headroom settings`: every service's settings as Markdown tables (env name, default, meaning).

README.md embeds this output; a test keeps the two in step."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

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


BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def all_markdown() -> str:
    return "\n\n".join(markdown(s) for s in SERVICES)


def update_readme(path: Path) -> bool:
    """Rewrite the block between the settings markers; True if it changed."""
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + all_markdown() + "\n" + text[end:]
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    argv = argv or []
    if argv[:1] == ["--update-readme"]:
        path = Path(argv[1] if len(argv) > 1 else "README.md")
        print(f"{path}: {'updated' if update_readme(path) else 'already current'}")
        return 0
    print(all_markdown())
    return 0
