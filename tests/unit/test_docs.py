"""Keep the docs true: every setting of every service is documented in README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.settings_doc import SERVICES, settings_class
from shared.settings import CommonSettings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_names_both_setup_commands_first():
    assert README.index("make up") < README.index("## Configuration")
    assert README.index("make test") < README.index("## Configuration")


@pytest.mark.parametrize("service", SERVICES)
def test_every_setting_is_documented(service):
    cls = settings_class(service)
    prefix = cls.model_config["env_prefix"].upper()
    missing = [
        f"{prefix}{name.upper()}"
        for name in cls.model_fields
        if name not in CommonSettings.model_fields and f"`{prefix}{name.upper()}`" not in README
    ]
    assert not missing, f"README.md does not document: {missing}"


def test_settings_block_is_current():
    from services.settings_doc import BEGIN, END, all_markdown

    block = README[README.index(BEGIN) + len(BEGIN) : README.index(END)].strip()
    assert block == all_markdown(), "run: .venv/bin/headroom settings --update-readme"


def test_common_settings_are_documented():
    for name in CommonSettings.model_fields:
        assert f"`HEADROOM_{name.upper()}`" in README
