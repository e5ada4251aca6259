"""Static checks of docker-compose.yml and deploy/Dockerfile (no Docker engine runs here)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
import yaml
from pydantic_settings import BaseSettings

from services.cli import SERVICES
from shared.settings import CommonSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
TARGETS = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", DOCKERFILE, flags=re.M | re.I))
OURS = {name: svc for name, svc in COMPOSE["services"].items() if "build" in svc}


def test_topology_matches_make_up():
    assert set(OURS) == set(SERVICES)
    assert {"nats", "redis"} <= set(COMPOSE["services"])
    assert COMPOSE["services"]["predictor"]["deploy"]["replicas"] == 2
    assert (
        len(COMPOSE["services"]["simulator"]["environment"]["HEADROOM_SIM_PORTS"].split(",")) == 4
    )
    assert "-js" in COMPOSE["services"]["nats"]["command"]


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_every_service_has_a_healthcheck(name):
    hc = COMPOSE["services"][name].get("healthcheck")
    assert hc and hc.get("test"), f"{name} has no healthcheck"


@pytest.mark.parametrize("name", sorted(COMPOSE["services"]))
def test_dependencies_wait_for_healthy(name):
    for dep, cond in COMPOSE["services"][name].get("depends_on", {}).items():
        assert dep in COMPOSE["services"], f"{name} depends on unknown {dep}"
        assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}: {cond}"
        assert COMPOSE["services"][dep].get("healthcheck"), f"{dep} has no healthcheck"


@pytest.mark.parametrize("name", sorted(OURS))
def test_command_and_build_target_exist(name):
    svc = OURS[name]
    assert svc["build"]["target"] in TARGETS
    assert (ROOT / svc["build"]["dockerfile"]).is_file()
    cmd = svc["command"]
    assert cmd[0] == "headroom" and cmd[1] in SERVICES
    module = importlib.import_module(f"services.{cmd[1]}.main")
    assert callable(module.main)
    assert svc["healthcheck"]["test"][:3] == ["CMD", "headroom", "health"]


def _settings_class(service: str) -> type[BaseSettings]:
    module = importlib.import_module(f"services.{service}.settings")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, CommonSettings) and c is not CommonSettings
    ]
    assert len(classes) == 1, f"services/{service}/settings.py should define one settings class"
    return classes[0]


@pytest.mark.parametrize("name", sorted(OURS))
def test_environment_names_real_settings(name):
    cls = _settings_class(name)
    prefix = cls.model_config["env_prefix"].upper()
    common = {f"HEADROOM_{f.upper()}" for f in CommonSettings.model_fields}
    for var in OURS[name]["environment"]:
        if var in common:
            continue
        assert var.startswith(prefix), f"{name}: {var} does not use prefix {prefix}"
        field = var[len(prefix) :].lower()
        assert field in cls.model_fields, f"{name}: {var} is not a setting of {cls.__name__}"
