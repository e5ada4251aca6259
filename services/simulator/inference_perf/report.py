"""inference-perf's request-lifecycle reports: field layout and metric definitions (pure).

Definitions, from ``inference_perf/reportgen/base.py`` (``summarize_requests``) of the
release whose files ship under ``../shared/measured`` (their keys and structure match it):

- ``load_summary``: ``count`` (all requests), ``schedule_delay`` = start - scheduled time;
  per stage also ``send_duration`` = max(start) - min(start), ``requested_rate`` and
  ``achieved_rate`` = count / send_duration.
- ``successes.latency``:
  ``request_latency`` = end - start;
  ``normalized_time_per_output_token`` = request_latency / output tokens (every success);
  for streamed responses with more than one token timestamp ``t``:
  ``time_to_first_token`` = t[0] - start,
  ``time_per_output_token`` = (t[-1] - t[0]) / (len(t) - 1), per request,
  ``inter_token_latency`` = every gap t[i+1] - t[i] of every request, pooled.
- ``successes.throughput``: input, output, input + output tokens and requests, each summed
  over the successes and divided by max(end) - min(start) over all requests.
- ``prompt_len`` / ``output_len``: the requests' token counts; ``failures``: ``count``,
  ``request_latency`` and ``prompt_len`` of the failed ones (``null`` when none).
- A distribution is ``{mean, min, <percentiles>, max}``: numpy's linear-interpolation
  percentile, 50 named ``median`` and the others ``p{p:g}`` (``p0.1`` ... ``p99.9``); an
  empty one is ``null``.

The token timestamps ``t`` are the client's, not the server's tokens: that release's
streaming client stamps every server-sent event twice (64 token events plus the closing
``[DONE]`` give 130 stamps, two of them µs apart each time), which is why its
``time_per_output_token`` is about half the decode step (3.47 ms at 1 request/s while the
steps take ~7.1 ms), ``inter_token_latency`` has its median near zero and its p75 at the
step time, and ``normalized_time_per_output_token`` (E2E over the output tokens, 7.46 ms)
is not affected. The measured files show it: (E2E - TTFT) / TPOT is 129.15-129.4 at every
unsaturated stage of both configurations (129 gaps plus ~1.2 ms the client spends after
``[DONE]``) and the mean TPOT equals the mean ITL to the last digit (same stamp count for
every request). inference-perf PR #566 describes the same doubling (a BOS re-tokenised into
every streamed chunk) and fixed it later. :class:`ClientClock` reproduces it by default;
``stamps_per_event=1, stamp_done=False`` gives the fixed definition (one stamp per token).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from services.simulator.inference_perf.client import RequestRecord


@dataclass(frozen=True)
class ClientClock:
    """How the client turns streamed events into its token timestamps."""

    stamps_per_event: int = 2  # the measured release stamps each event twice
    stamp_done: bool = True  # the closing [DONE] event is stamped too (sent with the last token)

    def token_times(self, rec: RequestRecord) -> list[float]:
        events = list(rec.token_times)
        if self.stamp_done and events:
            events.append(rec.end)
        return [t for t in events for _ in range(self.stamps_per_event)]


RELEASE = ClientClock()
PER_TOKEN = ClientClock(stamps_per_event=1, stamp_done=False)


def percentile_key(p: float) -> str:
    return "median" if p == 50 else f"p{p:g}"


def summarize(items: Sequence[float] | np.ndarray, percentiles: Sequence[float]) -> dict | None:
    """``{mean, min, p..., max}`` of ``items`` (None when empty)."""
    a = np.asarray(items, dtype=float)
    if a.size == 0:
        return None
    out = {"mean": float(np.mean(a)), "min": float(np.min(a))}
    for p, v in zip(percentiles, np.percentile(a, list(percentiles)), strict=True):
        out[percentile_key(p)] = float(v)
    out["max"] = float(np.max(a))
    return out


def summarize_requests(
    records: Sequence[RequestRecord],
    percentiles: Sequence[float],
    *,
    streaming: bool,
    stage_rate: float | None = None,
    clock: ClientClock = RELEASE,
) -> dict:
    """One lifecycle report (a stage's when ``stage_rate`` is given, else the summary)."""
    if not records:
        raise ValueError("no requests to summarise")
    ok = [r for r in records if r.error is None]
    failed = [r for r in records if r.error is not None]
    starts = np.array([r.start for r in records if not math.isnan(r.start)])
    ends = np.array([r.end for r in records if not math.isnan(r.end)])
    total_time = float(ends.max() - starts.min()) if starts.size and ends.size else 0.0
    delays = [r.start - r.scheduled for r in records if not math.isnan(r.start)]
    load: dict = {"count": len(records), "schedule_delay": summarize(delays, percentiles)}
    if stage_rate is not None:
        send = float(starts.max() - starts.min()) if starts.size else 0.0
        load["send_duration"] = send
        load["requested_rate"] = stage_rate
        load["achieved_rate"] = len(records) / send if send > 0 else 0.0

    latency = [r.end - r.start for r in ok]
    ntpot = [(r.end - r.start) / r.output_tokens if r.output_tokens > 0 else 0.0 for r in ok]
    ttft: list[float] = []
    tpot: list[float] = []
    gaps: list[np.ndarray] = []
    if streaming:
        for r in ok:
            t = clock.token_times(r)
            if len(t) > 1:
                ttft.append(t[0] - r.start)
                tpot.append((t[-1] - t[0]) / (len(t) - 1))
                gaps.append(np.diff(np.asarray(t)))
    itl = np.concatenate(gaps) if gaps else np.array([])
    tokens_in = sum(r.input_tokens for r in ok)
    tokens_out = sum(r.output_tokens for r in ok)

    def per_s(x: float) -> float:
        return x / total_time if total_time > 0 else 0.0

    return {
        "load_summary": load,
        "successes": {
            "count": len(ok),
            "latency": {
                "request_latency": summarize(latency, percentiles),
                "normalized_time_per_output_token": summarize(ntpot, percentiles),
                "time_per_output_token": summarize(tpot, percentiles),
                "time_to_first_token": summarize(ttft, percentiles),
                "inter_token_latency": summarize(itl, percentiles),
            },
            "throughput": {
                "input_tokens_per_sec": per_s(tokens_in),
                "output_tokens_per_sec": per_s(tokens_out),
                "total_tokens_per_sec": per_s(tokens_in + tokens_out),
                "requests_per_sec": per_s(len(ok)),
            },
            "prompt_len": summarize([r.input_tokens for r in ok], percentiles),
            "output_len": summarize([r.output_tokens for r in ok], percentiles),
        },
        "failures": {
            "count": len(failed),
            "request_latency": summarize(
                [r.end - r.start for r in failed if not math.isnan(r.start)], percentiles
            ),
            "prompt_len": summarize([r.input_tokens for r in failed], percentiles),
        },
    }


def lifecycle_reports(
    stages: Iterable[tuple[int, float, Sequence[RequestRecord]]],
    percentiles: Sequence[float],
    *,
    streaming: bool,
    clock: ClientClock = RELEASE,
) -> dict[str, dict]:
    """``{"stage_N_lifecycle_metrics": ..., "summary_lifecycle_metrics": ...}`` for the
    stages ``(id, requested rate, records)``."""
    out: dict[str, dict] = {}
    every: list[RequestRecord] = []
    for sid, rate, recs in stages:
        out[f"stage_{sid}_lifecycle_metrics"] = summarize_requests(
            recs, percentiles, streaming=streaming, stage_rate=rate, clock=clock
        )
        every.extend(recs)
    out["summary_lifecycle_metrics"] = summarize_requests(
        every, percentiles, streaming=streaming, clock=clock
    )
    return out
