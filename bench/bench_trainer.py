"""Trainer benchmark: sample ingestion into the window and one training cycle on 50,000 samples.

    .venv/bin/python -m bench.bench_trainer [--samples 50000] [--ingest 100000] [--jetstream]
        [--point-loss relative|squared]

Measures, on synthetic samples with a vLLM-like latency shape:

1. ingestion, single core: message bytes -> decode + validate -> stratified window (the
   pure path), and the trainer's full per-message path (``TrainerService.admit``: also
   Prometheus counters and the live-MAPE tracker). Target: >= 5,000 samples/s.
2. optional ``--jetstream``: end to end through a real JetStream stream (embedded NATS if
   none is reachable): publish, then time a started trainer until every sample is in its
   window and acknowledged.
3. one training cycle on ``--samples`` samples (arrays, holdout, fit TTFT and TPOT with 200
   trees of depth 6, evaluate, compare with a current model): target <= 5 s.

Prints one JSON object, then a human summary. Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time

from services.trainer.cycle import build_meta, run_cycle
from services.trainer.fitting import FitConfig, TrainingData
from services.trainer.settings import TrainerSettings
from services.trainer.strata import Strata
from services.trainer.validation import Limits, check, decode_sample
from services.trainer.window import SampleWindow
from shared.features import PodLoad, build_row
from shared.latency_model import LatencyModel
from shared.schemas import TrainingSample

BASE_TS = 1_750_000_000.0


def synthetic(n: int, seed: int = 0, prefix: str = "s") -> list[TrainingSample]:
    """Samples shaped like a loaded vLLM pod: TTFT grows with uncached prompt tokens and
    queueing, TPOT with batch size and KV use; 10% multiplicative noise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        waiting = rng.choice([0, 0, 0, 1, 2, 3, 5, 8, 13])
        running = rng.randint(0, 128)
        kv = min(1.0, running / 160 + rng.random() * 0.2)
        tokens = int(rng.lognormvariate(7.0, 1.0)) + 1
        prefix_score = rng.choice([0.0, 0.0, 0.3, 0.6, 0.95])
        load = PodLoad(waiting=waiting, running=running, kv_usage=kv,
                       prefill_tokens_in_flight=rng.randint(0, 8000),
                       decode_tokens_in_flight=rng.randint(0, 20000))  # fmt: skip
        row = build_row(tokens, prefix_score, load)
        noise = max(0.2, rng.gauss(1.0, 0.1))
        ttft = (25 + 0.03 * row[8] + 0.004 * row[5] + 180 * waiting) * noise
        tpot = (7.3 + 0.034 * running + 4 * kv) * max(0.2, rng.gauss(1.0, 0.1))
        out_tokens = rng.randint(2, 600)
        out.append(
            TrainingSample(
                request_id=f"{prefix}{i}", pool="default", pod=f"pod-{i % 8}", model="m",
                features=row, e2e_ms=ttft + tpot * (out_tokens - 1), input_tokens=tokens,
                output_tokens=out_tokens, streaming=True, ts=BASE_TS + i * 0.01,
                ttft_ms=ttft, tpot_ms=tpot, routing="predicted", model_version="v1",
                predicted_ttft_ms=ttft * 1.05, predicted_tpot_ms=tpot * 0.97,
            )
        )  # fmt: skip
    return out


def bench_window(messages: list[bytes], settings: TrainerSettings) -> dict:
    window = SampleWindow(settings.window_size, settings.dedup_size,
                          strata=Strata(settings.strata), bucket_cap=settings.bucket_cap)  # fmt: skip
    limits = Limits()
    now = BASE_TS + len(messages)
    started = time.perf_counter()
    for data in messages:
        s = decode_sample(data)
        if not isinstance(s, str) and check(s, limits, now) is None:
            window.offer(s, now)
    elapsed = time.perf_counter() - started
    cov = window.coverage()
    return {
        "samples": len(messages),
        "seconds": round(elapsed, 3),
        "samples_per_s": round(len(messages) / elapsed),
        "window": len(window),
        "buckets_filled": cov["buckets_filled"],
        "evicted": window.evicted,
    }


def bench_admit(messages: list[bytes], settings: TrainerSettings) -> dict:
    from services.trainer.service import TrainerService

    svc = TrainerService(settings, clock=lambda: BASE_TS + len(messages))
    started = time.perf_counter()
    for data in messages:
        svc.admit(data)
    elapsed = time.perf_counter() - started
    return {"samples": len(messages), "seconds": round(elapsed, 3),
            "samples_per_s": round(len(messages) / elapsed), "window": len(svc.window)}  # fmt: skip


async def bench_jetstream(samples: list[TrainingSample]) -> dict:
    import uuid

    from services.trainer.service import TrainerService
    from shared import embedded
    from shared.bus import connect_nats, connect_redis, ensure_samples_stream
    from shared.model_store import delete_namespace
    from shared.subjects import Names

    nats_url, nats_srv = embedded.ensure(
        "nats", os.environ.get("HEADROOM_NATS_URL", "nats://127.0.0.1:4222")
    )
    redis_url, redis_srv = embedded.ensure("redis", os.environ.get("HEADROOM_REDIS_URL", "redis://127.0.0.1:6379/0"))  # fmt: skip
    names = Names(f"bench-{uuid.uuid4().hex[:8]}")
    nc = await connect_nats(nats_url, "bench")
    js = nc.jetstream()
    await ensure_samples_stream(js, names)
    subject = names.samples("default")
    t0 = time.perf_counter()
    acks = [js.publish(subject, s.encode(), headers={"Nats-Msg-Id": s.request_id}) for s in samples]
    for i in range(0, len(acks), 1000):
        await asyncio.gather(*acks[i : i + 1000])
    publish_s = time.perf_counter() - t0
    settings = TrainerSettings(nats_url=nats_url, redis_url=redis_url, namespace=names.namespace,
                               admin_port=0, interval_s=3600, fetch_batch=512,
                               window_size=max(20000, len(samples)))  # fmt: skip
    svc = TrainerService(settings, clock=lambda: BASE_TS + len(samples))
    t0 = time.perf_counter()
    await svc.start()
    for _ in range(30_000):  # at most ~300 s
        if svc.window.added_total >= len(samples):
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    await svc.stop()
    await js.delete_stream(names.samples_stream)
    await nc.close()
    r = connect_redis(redis_url)
    await delete_namespace(r, names)
    await r.aclose()
    for srv in (nats_srv, redis_srv):
        if srv:
            srv.stop()
    return {"samples": len(samples), "publish_seconds": round(publish_s, 3),
            "consume_seconds": round(elapsed, 3), "samples_per_s": round(len(samples) / elapsed),
            "in_window": svc.window.added_total}  # fmt: skip


def bench_cycle(samples: list[TrainingSample], config: FitConfig) -> dict:
    half = len(samples) // 2
    # A current model trained on the older half, so the cycle includes the comparison.
    first = run_cycle(TrainingData.from_samples(samples[:half]), None, config)
    meta, blobs = build_meta("v1", BASE_TS, first, config)
    current = LatencyModel.from_blobs(meta, blobs)
    t0 = time.perf_counter()
    window = SampleWindow(len(samples), strata=Strata({}))
    for s in samples:
        window.offer(s)
    entries = window.snapshot()
    t1 = time.perf_counter()
    data = TrainingData.from_entries(entries)
    t2 = time.perf_counter()
    result = run_cycle(data, current, config)
    t3 = time.perf_counter()
    return {
        "samples": len(samples),
        "objective": config.objective,
        "point_loss": config.point_loss,
        "rounds": config.rounds,
        "threads": config.nthread,
        "arrays_seconds": round(t2 - t1, 3),
        "cycle_seconds": round(t3 - t2, 3),
        "total_seconds": round(t3 - t1, 3),
        "decision": result.decision,
        "holdout": result.holdout,
        "mape": {k: round(v["mape"], 4) for k, v in result.metrics.items() if v.get("mape")},
        "current_mape": {
            k: round(v["mape"], 4) for k, v in result.current_metrics.items() if v.get("mape")
        },
        "window_fill_seconds": round(t1 - t0, 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ingest", type=int, default=100_000, help="samples for the ingestion runs")
    p.add_argument("--samples", type=int, default=50_000, help="samples in the timed cycle")
    p.add_argument("--objective", default="mean", choices=["mean", "quantile", "both"])
    p.add_argument("--point-loss", default="relative", choices=["relative", "squared"],
                   help="loss of the mean models (relative also fits the level candidates)")  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="XGBoost threads")
    p.add_argument("--jetstream", action="store_true", help="also time ingestion via JetStream")
    args = p.parse_args(argv)

    settings = TrainerSettings(admin_port=0)
    ingest = synthetic(args.ingest, seed=1)
    messages = [s.encode() for s in ingest]
    out: dict = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    out["ingest_window"] = bench_window(messages, settings)
    out["ingest_admit"] = bench_admit(messages, settings)
    if args.jetstream:
        out["ingest_jetstream"] = asyncio.run(bench_jetstream(ingest[:20_000]))
    config = FitConfig(objective=args.objective, nthread=args.threads, point_loss=args.point_loss)
    out["cycle"] = bench_cycle(synthetic(args.samples, seed=2, prefix="c"), config)
    print(json.dumps(out, indent=2))

    w, a, c = out["ingest_window"], out["ingest_admit"], out["cycle"]
    print("\nTrainer benchmark")
    print(f"  ingestion into the window (decode+validate+stratify), 1 core: "
          f"{w['samples_per_s']:,} samples/s  (target >= 5,000)")  # fmt: skip
    print(
        f"  trainer per-message path (+ metrics, live MAPE):           {a['samples_per_s']:,} samples/s"
    )
    if "ingest_jetstream" in out:
        j = out["ingest_jetstream"]
        print(
            f"  end to end through JetStream (fetch, admit, ack):          {j['samples_per_s']:,} samples/s"
        )
    print(f"  training cycle on {c['samples']:,} samples ({c['objective']}, {c['point_loss']} loss, "
          f"{c['rounds']} trees, "
          f"{c['threads']} thread): {c['total_seconds']:.2f} s  (target <= 5 s; arrays "
          f"{c['arrays_seconds']:.2f} s, fit+evaluate+compare {c['cycle_seconds']:.2f} s)")  # fmt: skip
    print(f"  holdout MAPE: {c['mape']}  current on the same holdout: {c['current_mape']} "
          f"-> {c['decision']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
