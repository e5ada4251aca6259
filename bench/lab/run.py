"""One lab run: read the trace, build the cluster and the learner, simulate, report.

The report is the JSON object described in docs/benchmarks.md ("Routing lab"); the same
config and seed give the same report except ``wall_seconds``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.lab.config import LLMD_PREDICTED, POLICY_TRAINER_DEFAULTS, LabConfig
from bench.lab.learning import OnlineLearner
from bench.lab.oracle import check_policies, routing_profile
from bench.lab.regret import RegretProbe, default_regret_samples, regret_summary
from bench.lab.report import latency_stats, prediction_summary, summarize, twin_summary
from bench.lab.simulation import LabSimulation
from bench.lab.timeline import mape_timeline
from bench.traces import Trace, read_trace
from services.gateway.scheduling.config import SchedulingConfig, load_config
from services.gateway.settings import GatewaySettings
from services.predictor.settings import PredictorSettings
from services.trainer.settings import TrainerSettings


def load_lab_trace(config: LabConfig) -> Trace:
    return load_lab_traces(config)[0]


def load_lab_traces(config: LabConfig) -> tuple[Trace, int | None]:
    """The run's trace and, with ``then_trace``, the index of the second trace's first
    request (where the workload shifts)."""
    trace = read_trace(
        config.trace,
        format=config.trace_format,
        rate_scale=config.rate_scale,
        limit=config.limit,
        offset=config.offset,
        seed=config.seed,
    )
    if config.then_trace:
        then = read_trace(
            config.then_trace,
            rate_scale=config.then_rate_scale or config.rate_scale,
            limit=config.then_limit,
            seed=config.seed,
        )
        base = max((r.index for r in trace.requests), default=-1) + 1
        return concatenate(trace, then), base
    return trace, None


def concatenate(first: Trace, then: Trace) -> Trace:
    """``then``'s requests after ``first``'s: arrivals shifted to start one mean gap after
    the last of ``first``, indices after ``first``'s (distinct request ids and prompts)."""
    reqs = first.requests
    gap = first.duration_s / max(1, len(reqs) - 1) if len(reqs) > 1 else 0.0
    start = first.duration_s + gap
    base = max((r.index for r in reqs), default=-1) + 1
    shifted = [
        replace(r, index=base + r.index, arrival_s=start + r.arrival_s) for r in then.requests
    ]
    return Trace(
        path=first.path, format=f"{first.format}+{then.format}", requests=reqs + shifted,
        skipped=first.skipped + then.skipped,
    )  # fmt: skip


def workload_spec(trace: str | Path) -> dict | None:
    """A generated workload's spec (``<trace>.spec.json`` beside it, bench/lab/workloads.py):
    its family, parameters and seed, for the report; None for other traces."""
    path = Path(trace).with_suffix(".spec.json")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def auto_train_interval(trainer: TrainerSettings, duration_s: float, max_cycles: int) -> float:
    """The trainer's ``interval_s``, stretched so a run holds at most ``max_cycles`` refit
    checks (each refit costs ~0.3-0.6 s of wall time; see docs/benchmarks.md)."""
    return max(trainer.interval_s, duration_s / max(1, max_cycles))


def trainer_settings(config: LabConfig) -> TrainerSettings:
    """The trainer's settings for this run: the policy's defaults
    (:data:`~bench.lab.config.POLICY_TRAINER_DEFAULTS`) under the run's overrides."""
    overrides = {**POLICY_TRAINER_DEFAULTS.get(config.policy, {}), **config.trainer_overrides}
    return TrainerSettings(**overrides)  # type: ignore[arg-type]


def run_lab(
    config: LabConfig,
    *,
    trace: Trace | None = None,
    scheduling: SchedulingConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_submit: Callable | None = None,
    on_decision: Callable | None = None,
    records_out: list | None = None,
    shadow_oracle: bool = False,
) -> dict:
    """Run the lab once and return its report. ``trace`` (already read with the config's
    rate scale, limit and offset) and ``scheduling`` may be passed to skip re-reading them;
    ``progress(done, total)`` is called as arrivals are routed; ``on_submit`` is the
    simulation's hook (see :class:`LabSimulation`), as is ``on_decision``, and ``records_out``, when given, receives
    the per-request records; ``shadow_oracle`` forks every candidate of every decision
    for the noise-blind oracle's TTFT, for ``on_decision`` to read (diagnostics: the run
    is the same, only slower)."""
    started = time.perf_counter()
    shift_index = None
    if trace is None:
        trace, shift_index = load_lab_traces(config)
    scheduling = scheduling or load_config(config.profiles_path)
    check_policies(scheduling.profiles, config.policy)
    pool = config.resolved_pool()
    engines = list(dict.fromkeys(r.describe() for r in pool))
    gateway = GatewaySettings()
    sched = scheduling.scheduler(routing_profile(config.policy))
    learner = None
    interval = None
    if sched.predicts:
        trainer = trainer_settings(config)
        interval = config.train_interval_s or auto_train_interval(
            trainer, trace.duration_s, config.max_train_cycles
        )
        objective = config.predictor_objective or PredictorSettings().objective
        learner = OnlineLearner(
            trainer,
            interval_s=interval,
            publish_delay_s=config.publish_delay_s,
            predictor_objective=objective,
        )
        if config.llmd_twin:  # llmd-predicted's learner as its own run would have it
            learner.twin = OnlineLearner(
                trainer_settings(replace(config, policy=LLMD_PREDICTED)),
                interval_s=interval,
                publish_delay_s=config.publish_delay_s,
                predictor_objective=objective,
            )
    n_regret = config.regret_samples
    if n_regret is None:
        n_regret = default_regret_samples(len(trace))
    probe = RegretProbe(len(trace), n_regret, config.seed) if n_regret > 0 else None
    sim = LabSimulation(
        trace.requests,
        profile=[r.profile for r in pool],
        pods=config.pods,
        seed=config.seed,
        scheduling=scheduling,
        policy=config.policy,
        gateway=gateway,
        model=config.model,
        streaming=config.streaming,
        slo_ttft_ms=config.slo_ttft_ms,
        slo_tpot_ms=config.slo_tpot_ms,
        priority=config.priority,
        scrape_interval_s=config.scrape_interval_s,
        ingress_s_per_token=config.ingress_us_per_token / 1e6,
        ingress_s=config.ingress_ms / 1000.0,
        pod_ingress_s_per_token=config.pod_ingress_us_per_token / 1e6,
        pod_ingress_s=config.pod_ingress_ms / 1000.0,
        predict_latency_s=config.predict_latency_ms / 1000.0,
        client_max_tokens=config.client_max_tokens,
        learner=learner,
        on_submit=on_submit,
        on_decision=on_decision,
        regret=probe,
        shadow_oracle=shadow_oracle,
        rollout_horizon_s=config.rollout_horizon_s,
        rollout_objective=config.rollout_objective,
    )
    total = len(trace)
    records = sim.run(None if progress is None else (lambda done: progress(done, total)))
    if records_out is not None:
        records_out.extend(records)
    summary = summarize(records, slo_ttft_ms=config.slo_ttft_ms, slo_tpot_ms=config.slo_tpot_ms)
    prediction = _prediction(records, learner, config, interval, summary["routing"], shift_index)
    report = {
        "policy": config.policy,
        "trace": Path(config.trace).name,
        "workload_spec": workload_spec(config.trace),
        "then_trace": Path(config.then_trace).name if config.then_trace else None,
        "trace_format": trace.format,
        "pods": config.pods,
        "profile": config.profile,
        "vllm_args": config.vllm_args,
        "engine": engines[0] if len(engines) == 1 else engines,
        "rate_scale": config.rate_scale,
        "seed": config.seed,
        "limit": config.limit,
        "offset": config.offset,
        "streaming": config.streaming,
        "client_max_tokens": config.client_max_tokens,
        **summary,
        "offered_rps": round((total - 1) / trace.duration_s, 4) if trace.duration_s > 0 else None,
        "skipped_lines": trace.skipped_count,
        "prefix_cache_hit_rate": sim.prefix_cache_hit_rate(),
        "preemptions": sim.preemptions(),
        "prediction": prediction,
        "regret_ms": probe.summary() if probe is not None else regret_summary(None),
        "dispatch_ms": latency_stats(
            [(r.dispatched_s - r.arrival_s) * 1000.0 for r in records if r.dispatched_s is not None]
        ),
        "flow": None if sim.flow is None else {"released": dict(sim.flow.released)},
        # requests routed as hopeless (past their TTFT SLO wherever they went), and their share
        "sacrificed": sim.sacrificed,
        "sacrificed_share": round(sim.sacrificed / total, 5) if total else None,
        # the greedy TTFT oracle's decisions and their wall-time cost (bench/lab/oracle.py)
        "oracle": sim.oracle.summary() if sim.oracle is not None else None,
        # the one-step rollout's decisions and their cost (bench/lab/rollout.py)
        "rollout": sim.rollout.summary() if sim.rollout is not None else None,
        "wall_seconds": round(time.perf_counter() - started, 3),
    }
    return report


def _prediction(
    records, learner, config: LabConfig, interval, paths: dict, shift_index: int | None = None
) -> dict:
    keys = ("ttft_mape", "tpot_mape", "samples", "model_versions", "fallback_decisions")
    if learner is None:
        return dict.fromkeys(keys)
    out = prediction_summary(records, after_samples=config.mape_after)
    out["mape_timeline"] = mape_timeline(records, shift_index=shift_index)
    if learner.twin is not None:
        twin = learner.twin
        out["llmd_twin"] = {
            **twin_summary(records, after_samples=config.mape_after),
            "feature_set": twin.settings.feature_set,
            "point_loss": twin.settings.point_loss,
            "model_versions": twin.promoted,
            "samples": twin.samples,
        }
    out["shifts_detected"] = learner.shifts
    return {
        "ttft_mape": out.pop("ttft_mape"),
        "tpot_mape": out.pop("tpot_mape"),
        "samples": learner.samples,
        "model_versions": learner.promoted,
        "fallback_decisions": paths.get("fallback", 0),
        **out,
        "train_interval_s": round(interval, 3),
        "refits": learner.cycles,
        "rejected_candidates": learner.rejected,
        "trainer_objective": learner.settings.objective,
        "predictor_objective": learner.prefer,
        "rejected_samples": dict(sorted(learner.rejected_samples.items())),
    }
