"""Simulator settings (env prefix ``HEADROOM_SIM_``)."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.simulator.profiles import PROFILES, Profile, parse_pool
from services.simulator.vllm_args import DEFAULT_VLLM_VERSION, Resolved, resolve_named
from shared.settings import CommonSettings

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# vLLM's OpenAI server runs on uvicorn, whose listen backlog defaults to 2048 (aiohttp's to 128)
LISTEN_BACKLOG = 2048


class SimulatorSettings(CommonSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADROOM_SIM_", extra="ignore", populate_by_name=True
    )

    host: str = Field("127.0.0.1", description="Interface every pod listens on")
    ports: str = Field("8001", description="Comma-separated ports, one simulated pod each")
    names: str = Field("", description="Comma-separated pod names (default pod-<i>)")
    profile: str = Field(
        "h100-llama3-8b",
        description="Engine profile (see profiles.py), or a mixed pool with counts summing to "
        "the ports, pods in port order: h100-llama3-8b:4,a100-llama3-8b:4",
    )
    vllm_args: str = Field(
        "",
        description="The pods' `vllm serve` engine flags, applied to the profile as vLLM "
        "resolves them (e.g. `--max-num-seqs=128 --no-enable-prefix-caching`; empty: the "
        "profile's preset)",
    )
    vllm_version: str = Field(
        DEFAULT_VLLM_VERSION, description="vLLM version whose flag resolution to follow"
    )
    model: str = Field(DEFAULT_MODEL, description="Model name the pods serve")
    backlog: int = Field(
        LISTEN_BACKLOG,
        ge=1,
        description="Listen backlog of each pod's socket (kernel accept queue; capped by "
        "net.core.somaxconn). Default 2048, uvicorn's and so vLLM's: a pod whose event loop "
        "is busy still completes connections up to this many",
    )
    seed: int = Field(0, description="Base random seed; pod i uses seed + i")
    api_key: SecretStr = Field(
        SecretStr(""),
        validation_alias=AliasChoices("api_key", "HEADROOM_SIM_API_KEY", "VLLM_API_KEY"),
        description="Like vLLM --api-key / VLLM_API_KEY: /v1/* needs one of these "
        "comma-separated keys as a bearer token (401 otherwise); empty: open",
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        for part in v.split(","):
            name = part.partition(":")[0].strip()
            if name not in PROFILES:
                raise ValueError(f"unknown profile {name!r}; known: {sorted(PROFILES)}")
        return v

    @field_validator("ports")
    @classmethod
    def _valid_ports(cls, v: str) -> str:
        ports = [p.strip() for p in v.split(",") if p.strip()]
        if not ports:
            raise ValueError("at least one port is required")
        for p in ports:
            if not p.isdigit() or not 0 <= int(p) <= 65535:
                raise ValueError(f"invalid port {p!r}")
        return ",".join(ports)

    @model_validator(mode="after")
    def _names_match_ports(self) -> SimulatorSettings:
        self.name_list()
        self.resolved_pool()  # invalid vLLM flags or pool counts fail at startup
        return self

    def api_keys(self) -> list[str]:
        return [k.strip() for k in self.api_key.get_secret_value().split(",") if k.strip()]

    def resolved(self) -> Resolved:
        """The first pod's engine (every pod's unless the profile names a mixed pool)."""
        return self.resolved_pool()[0]

    def resolved_pool(self) -> list[Resolved]:
        """Each pod's engine, in port order (the same vLLM flags on every class)."""
        names = parse_pool(self.profile, len(self.port_list()))
        by_name = {n: resolve_named(n, self.vllm_args or None, self.vllm_version) for n in names}
        return [by_name[n] for n in names]

    def engine_profile(self) -> Profile:
        return self.resolved().profile

    def port_list(self) -> list[int]:
        return [int(p) for p in self.ports.split(",")]

    def name_list(self) -> list[str]:
        ports = self.port_list()
        names = [n.strip() for n in self.names.split(",") if n.strip()]
        if not names:
            return [f"pod-{i}" for i in range(len(ports))]
        if len(names) != len(ports):
            raise ValueError(f"{len(names)} names given for {len(ports)} ports")
        return names
