"""Rebuild the training window from the samples stream after a trainer restart.

The durable consumer only delivers samples not yet acknowledged, so a restarted trainer
would start with an empty window. On start it therefore reads back, with a short-lived
ephemeral consumer, the stream up to the last sequence the durable consumer had delivered
(at most ``max_messages`` of them) through the same admission path as live samples. The
window is a deterministic function of the samples offered, so it comes back as it was;
samples that were delivered but not acknowledged are replayed and then de-duplicated when
JetStream redelivers them, so none is lost and none enters the window twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from shared.subjects import Names

log = logging.getLogger(__name__)


async def delivered_upto(js: JetStreamContext, names: Names) -> int:
    """Stream sequence of the last message the trainer's durable consumer delivered."""
    try:
        info = await js.consumer_info(names.samples_stream, names.trainer_durable)
    except NotFoundError:
        return 0
    return info.delivered.stream_seq if info.delivered else 0


async def replay_history(
    js: JetStreamContext,
    names: Names,
    admit: Callable[[bytes], bool],
    *,
    upto_seq: int,
    max_messages: int,
    batch: int = 256,
    fetch_timeout_s: float = 1.0,
    budget_s: float = 60.0,
) -> int:
    """Offer stream messages ``(upto_seq - max_messages, upto_seq]`` to ``admit`` (which
    returns True if the sample entered the window). Bounded in count and time. Returns the
    number admitted."""
    if upto_seq <= 0 or max_messages <= 0:
        return 0
    state = (await js.stream_info(names.samples_stream)).state
    start = max(state.first_seq, upto_seq - max_messages + 1)
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
    done = False
    try:
        while not done:
            if time.monotonic() > deadline:
                log.warning("replay stopped by its %.0f s budget before seq %d", budget_s, upto_seq)
                break
            try:
                msgs = await sub.fetch(batch, timeout=fetch_timeout_s)
            except TimeoutError:
                break  # nothing more within the window
            for msg in msgs:
                seq = msg.metadata.sequence.stream
                if seq > upto_seq:
                    done = True
                    break
                added += admit(msg.data)
                done = seq == upto_seq
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(names.samples_stream, name)
    log.info("replayed stream seq %d..%d: %d samples into the window", start, upto_seq, added)
    return added
