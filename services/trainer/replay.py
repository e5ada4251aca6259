"""Rebuild the training window from the samples stream after a trainer restart.

The durable consumer only delivers samples not yet acknowledged, so a restarted trainer
would start with an empty window and, at its next fit, replace a model trained on the whole
window with one trained on a handful of samples. On start the trainer therefore reads back
the last ``window_size`` samples it had already acknowledged (up to the durable's ack
floor) with a short-lived ephemeral consumer. Samples are validated like live ones;
anything invalid is skipped silently (it was counted when first received).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from services.trainer.window import SampleWindow
from shared.schemas import SchemaError, TrainingSample
from shared.subjects import Names

log = logging.getLogger(__name__)


async def acked_upto(js: JetStreamContext, names: Names) -> int:
    """Stream sequence up to which the trainer's durable consumer acknowledged everything."""
    try:
        info = await js.consumer_info(names.samples_stream, names.trainer_durable)
    except NotFoundError:
        return 0
    return info.ack_floor.stream_seq if info.ack_floor else 0


async def replay_history(
    js: JetStreamContext,
    names: Names,
    window: SampleWindow,
    *,
    upto_seq: int,
    batch: int = 256,
    fetch_timeout_s: float = 1.0,
    budget_s: float = 30.0,
) -> int:
    """Add stream samples ``(upto_seq - window.max_size, upto_seq]`` to ``window``.

    Bounded in count (the window size) and time (``budget_s``). Returns samples added.
    """
    if upto_seq <= 0:
        return 0
    state = (await js.stream_info(names.samples_stream)).state
    start = max(state.first_seq, upto_seq - window.max_size + 1)
    if start > upto_seq:
        return 0
    name = f"trainer-replay-{uuid.uuid4().hex[:10]}"
    await js.add_consumer(
        names.samples_stream,
        ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
            filter_subject=names.samples_wildcard,
        ),
    )
    sub = await js.pull_subscribe_bind(consumer=name, stream=names.samples_stream)
    added = 0
    deadline = time.monotonic() + budget_s
    try:
        done = False
        while not done and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(batch, timeout=fetch_timeout_s)
            except TimeoutError:
                break  # nothing more within the window
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                done = done or seq >= upto_seq
                if seq > upto_seq:
                    break
                try:
                    sample = TrainingSample.decode(msg.data)
                except SchemaError:
                    continue
                added += window.add(sample)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(names.samples_stream, name)
    log.info("replayed %d samples (stream seq %d..%d) into the window", added, start, upto_seq)
    return added
