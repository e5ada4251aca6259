"""Workload-shift detection from live prediction error (shared/drift.py ShiftDetector), the
window forgetting the samples before a shift, and the trainer's reaction in the lab's
learner (the same code path the trainer service runs)."""

from __future__ import annotations

import random

import pytest

from bench.lab.learning import OnlineLearner
from bench.lab.report import OK, RequestRecord
from bench.lab.timeline import mape_timeline, plot, timelines
from services.trainer.settings import TrainerSettings
from shared.drift import ShiftDetector
from tests.unit.trainer_synth import synthetic_samples as make_samples


def _feed(d: ShiftDetector, errs, rng):
    hits = []
    for i, e in enumerate(errs):
        a = 100.0
        hit = d.observe(a * (1 + rng.uniform(-2 * e, 2 * e)), a, float(i))
        if hit is not None:
            hits.append((i, hit))
    return hits


def test_a_jump_in_error_is_detected_once_near_where_it_began():
    rng = random.Random(0)
    d = ShiftDetector(short=200, ratio=1.5)
    hits = _feed(d, [0.3] * 3000 + [0.9] * 3000, rng)
    assert len(hits) == 1
    seen, began = hits[0]
    assert 3000 < seen < 3200 and 2800 <= began <= 3000  # within one window of the change
    assert d.level_at_shift > 1.5 * 0.3


def test_steady_noisy_error_is_no_shift():
    rng = random.Random(1)
    d = ShiftDetector(short=200, ratio=1.5)
    errs = [0.3 + 0.1 * ((i // 500) % 2) for i in range(10000)]  # slow wobble 30-40%
    assert _feed(d, errs, rng) == []


def test_detector_rejects_bad_parameters_and_ignores_missing_pairs():
    with pytest.raises(ValueError):
        ShiftDetector(short=1)
    with pytest.raises(ValueError):
        ShiftDetector(ratio=1.0)
    d = ShiftDetector(short=2)
    assert d.observe(None, 5.0, 0.0) is None and d.observe(5.0, float("nan"), 0.0) is None
    assert d.recent is None


def test_window_forgets_samples_before_a_shift():
    s = TrainerSettings(min_samples=10)
    w = s.sample_window()
    for smp in make_samples(50):
        w.offer(smp, smp.ts)
    cutoff = sorted(e.ts for e in w.snapshot())[20]
    assert w.forget_before(cutoff) == 20 and len(w) == 30
    assert all(e.ts >= cutoff for e in w.snapshot()) and w.evicted["shift"] == 20


def test_the_learner_forgets_and_refits_at_once_on_a_shift():
    s = TrainerSettings(min_samples=20, min_new_samples=10, rounds=10, shift_window=50)
    learner = OnlineLearner(s, interval_s=1e9)  # no cadence: only the shift refits
    samples = make_samples(400)
    for k, smp in enumerate(samples):
        # served predictions 10% off, then 300% off from sample 200 on (a new workload)
        off = 0.1 if k < 200 else 3.0
        smp.predicted_ttft_ms = smp.ttft_ms * (1 + off)
        learner.offer(smp, smp.ts)
    assert len(learner.shifts) == 1
    shift = learner.shifts[0]
    assert shift["dropped"] > 100 and learner.promoted >= 1
    # at once, then after every 50 new samples (shift_window) up to shift_refits more times
    after = 400 - shift["samples"]
    assert learner.cycles == 1 + min(s.shift_refits, after // 50)
    assert TrainerSettings(shift_react=False).shift_detector() is None


def test_timeline_recovery_summary():
    recs = []
    for i in range(3000):
        r = RequestRecord(i, float(i), 100, 10, status=OK)
        r.dispatched_s, r.first_token_s, r.finished_s = float(i), i + 0.1, i + 1.0
        r.output_tokens = 10
        err = 0.2 if i < 1500 else (1.0 if i < 1900 else 0.22)
        r.predicted_ttft_ms = 100.0 * (1 + err)
        r.predicted_tpot_ms = 100.0
        recs.append(r)
    tl = mape_timeline(recs, shift_index=1500, window=250, every=100)
    s = tl["shift"]
    assert s["at_sample"] == 1501 and s["pre_ttft_mape"] == pytest.approx(0.2)
    # 400 second-trace samples at 100%, then 22%: the last 250 average <= 24% once 244 of
    # them are at 22% ((6 x 1.0 + 244 x 0.22) / 250 = 0.2387)
    assert s["recovered_after"] == 644 and s["ttft_mape_at_1000"] == pytest.approx(0.22)
    assert len(tl["points"]) == 30


def test_plot_timeline_reads_lab_reports_and_shift_bounds(tmp_path):
    tl = {"window": 250, "points": [{"samples": k, "t": k, "ttft_mape": 0.2, "tpot_mape": None}
          for k in range(100, 1100, 100)], "shift": {"at_sample": 500, "pre_ttft_mape": 0.2,
          "tolerance": 1.2}}  # fmt: skip
    lab = timelines("live", {"prediction": {"mape_timeline": tl}})
    bound = timelines("bound", {"shift": {"step": 25, "sets": {"a": tl, "b": tl}}})
    assert lab == [("live", tl)] and [n for n, _ in bound] == ["bound: a", "bound: b"]
    out = tmp_path / "t.png"
    plot(lab + bound, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bursty(n: int, rng: random.Random) -> list[float]:
    """Stationary error ~30% with a burst every 1,000 observations: 60 in a row at 400%
    (requests queued behind the burst, their TTFT under-predicted several-fold)."""
    return [4.0 if i % 1000 < 60 else 0.3 for i in range(n)]


def test_a_burst_lifts_the_mean_past_the_ratio_but_not_the_median():
    errs = _bursty(8000, random.Random(2))
    assert _feed(ShiftDetector(short=200, ratio=1.5), errs, random.Random(3)) != []
    median = ShiftDetector(short=200, ratio=1.5, statistic="median")
    assert _feed(median, errs, random.Random(3)) == []


def test_the_median_detector_still_sees_a_shift_within_a_window():
    rng = random.Random(0)
    d = ShiftDetector(short=200, ratio=1.5, statistic="median")
    hits = _feed(d, [0.3] * 3000 + [0.9] * 3000, rng)
    assert len(hits) == 1
    seen, began = hits[0]
    assert 3000 < seen < 3200 and 2800 <= began <= 3000


def test_median_level_is_the_windows_median():
    import statistics

    rng = random.Random(5)
    d = ShiftDetector(short=7, ratio=100.0, statistic="median")
    apes = []
    for i in range(40):
        actual = rng.uniform(10, 100)
        pred = actual * (1 + rng.uniform(-1, 1))
        d.observe(pred, actual, float(i))
        apes.append(abs(pred - actual) / actual)
        assert d.recent == pytest.approx(statistics.median(apes[-7:]))
    with pytest.raises(ValueError):
        ShiftDetector(statistic="p90")
    assert TrainerSettings(shift_statistic="median").shift_detector().statistic == "median"
