"""What one lab run is: the trace slice, the cluster, the policy, SLOs and learning cadence."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.simulator.profiles import Profile, parse_pool
from services.simulator.vllm_args import Resolved, resolve_named

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_MAX_TRAIN_CYCLES = 60
# Request ingress (HTTP, JSON, tokenizer) into the gateway and from the gateway into the pod,
# and the prediction call: measured against the live stack on the dev box (docs/benchmarks.md).
DEFAULT_INGRESS_MS = 3.0
DEFAULT_INGRESS_US_PER_TOKEN = 1.0
DEFAULT_POD_INGRESS_MS = 2.0
DEFAULT_POD_INGRESS_US_PER_TOKEN = 1.0
DEFAULT_PREDICT_LATENCY_MS = 2.0
# Trainer settings a policy runs with unless --trainer-set says otherwise: llmd-predicted is
# the faithful upstream baseline, so its learner fits raw milliseconds on llm-d's eleven
# features (feature set v1) with squared error and uncalibrated quantile trees, as llm-d's
# predictor does (ours fits log(1 + ms) on v2 with the relative point loss and calibrates its
# quantile models by default).
LLMD_PREDICTED = "llmd-predicted"
POLICY_TRAINER_DEFAULTS: dict[str, dict[str, object]] = {
    LLMD_PREDICTED: {
        "target_transform": "none",
        "feature_set": "v1",
        "point_loss": "squared",
        "quantile_calibration": 0.0,
    },
}

# oracle-rollout(-blind)'s default cohort horizon in virtual seconds (bench/lab/rollout.py)
DEFAULT_HORIZON_S = 2.0
# its scores of a copy: the sum of the cohort's TTFTs (their mean), or of their squares (the
# tail weighs more)
ROLLOUT_OBJECTIVES = ("sum", "squares")


@dataclass(frozen=True)
class LabConfig:
    trace: str
    policy: str = "headroom"  # a profile name in the scheduling config
    pods: int = 8
    # simulator hardware profile, or a mixed pool "h100-llama3-8b:4,a100-llama3-8b:4"
    profile: str = "h100-llama3-8b"
    # the pods' `vllm serve` flags (services/simulator/vllm_args.py); None: the profile's preset
    vllm_args: str | None = None
    vllm_version: str | None = None  # None: services.simulator.vllm_args.DEFAULT_VLLM_VERSION
    rate_scale: float = 1.0
    limit: int | None = None
    offset: int = 0
    seed: int = 0
    trace_format: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int | None = None  # None: the model objective's priority from the config
    streaming: bool = False
    model: str = DEFAULT_MODEL
    profiles_path: str | None = None  # scheduling profiles YAML (None: the shipped file)
    scrape_interval_s: float = 0.1  # the collector's default cadence
    # client -> gateway routing, and gateway -> pod engine (see bench/lab/simulation.py)
    ingress_ms: float = DEFAULT_INGRESS_MS
    ingress_us_per_token: float = DEFAULT_INGRESS_US_PER_TOKEN
    pod_ingress_ms: float = DEFAULT_POD_INGRESS_MS
    pod_ingress_us_per_token: float = DEFAULT_POD_INGRESS_US_PER_TOKEN
    predict_latency_ms: float = DEFAULT_PREDICT_LATENCY_MS  # predicting profiles only
    # the max_tokens clients send: None, each request's own output length (an exact decode
    # budget, which real clients seldom send); N, every request sends N (>= every output, so
    # the engines generate the same tokens and only what the gateway reads changes)
    client_max_tokens: int | None = None
    # learning (policies with a predicted-latency producer)
    train_interval_s: float | None = None  # None: auto (see docs/benchmarks.md)
    max_train_cycles: int = DEFAULT_MAX_TRAIN_CYCLES  # what "auto" aims at
    publish_delay_s: float = 0.5  # promoted version -> predictor, in virtual seconds
    mape_after: int = 2000  # report MAPE on requests routed after this many samples
    # a second learner with llmd-predicted's trainer settings, fed this run's samples, that
    # predicts the chosen pod at each predicted decision and never routes: issue 15's MAPE
    # ratio against llm-d's model on the same run (report: prediction.llmd_twin)
    llmd_twin: bool = False
    trainer_overrides: dict[str, object] = field(default_factory=dict)  # TrainerSettings fields
    predictor_objective: str | None = None  # None: PredictorSettings().objective
    # decisions whose regret is measured by forking every candidate (bench/lab/regret.py)
    # (None: bench.lab.regret.default_regret_samples of the trace's length; 0: off)
    regret_samples: int | None = None
    # oracle-rollout(-blind): the cohort's horizon after each decision (bench/lab/rollout.py)
    rollout_horizon_s: float = DEFAULT_HORIZON_S
    rollout_objective: str = "sum"  # sum | squares of the cohort's TTFTs
    # a workload shift: this trace's requests follow the first trace's (issue 15, drift)
    then_trace: str | None = None
    then_rate_scale: float | None = None  # None: rate_scale
    then_limit: int | None = None

    def engine_profile(self) -> Profile:
        """The pods' engine: the hardware profile with the vLLM flags applied (the first
        pod's in a mixed pool)."""
        return self.resolved_pool()[0].profile

    def resolved_pool(self) -> list[Resolved]:
        """Each pod's engine (``profile`` may name a mixed pool: ``name:count,...``), the
        same vLLM flags applied to every class."""
        names = parse_pool(self.profile, self.pods)
        by_name = {n: resolve_named(n, self.vllm_args, self.vllm_version) for n in set(names)}
        return [by_name[n] for n in names]

    def pod_profiles(self) -> list[Profile]:
        return [r.profile for r in self.resolved_pool()]

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise ValueError("pods must be >= 1")
        if not self.rate_scale > 0:
            raise ValueError("rate_scale must be > 0")
        self.engine_profile()  # unknown profile or invalid vLLM flags fail here
        for name in ("ingress_ms", "ingress_us_per_token", "pod_ingress_ms",
                     "pod_ingress_us_per_token", "predict_latency_ms"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not self.scrape_interval_s > 0:
            raise ValueError("scrape_interval_s must be > 0")
        if self.regret_samples is not None and self.regret_samples < 0:
            raise ValueError("regret_samples must be >= 0")
        if self.rollout_horizon_s < 0:
            raise ValueError("rollout_horizon_s must be >= 0")
        if self.rollout_objective not in ROLLOUT_OBJECTIVES:
            raise ValueError(f"rollout_objective must be one of {ROLLOUT_OBJECTIVES}")
        if self.client_max_tokens is not None and self.client_max_tokens < 1:
            raise ValueError("client_max_tokens must be >= 1")
        if self.train_interval_s is not None and not self.train_interval_s > 0:
            raise ValueError("train_interval_s must be > 0")
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0")
