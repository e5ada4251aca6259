"""Where every training sample ended up, observed from outside the services.

- A tap: a NATS connection of the bench that watches JetStream's publish acknowledgements
  to the gateways (they are replies on ``_INBOX.>``; an ack names the stream and the
  sequence it stored the sample at). Acks the server sent while the tap was connected are
  all seen, so a sample acknowledged and then missing from the stream is found too.
- The stream itself, read back at the end: sequence -> ``Nats-Msg-Id`` (= the request id).
- The trainer's window: ``GET /window/ids`` on its admin port.

Together they give, per request id: stored how many times, in the window how many times
(bench/faults/report.py turns that into lost and duplicate samples).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections import Counter

import nats
import orjson
from nats.js.errors import NotFoundError

from bench.faults.report import Ledger
from shared.subjects import Names


class SampleLedger:
    def __init__(self, nats_url: str, names: Names, clock=time.monotonic) -> None:
        self.nats_url = nats_url
        self.names = names
        self.clock = clock  # when acks are seen (the bench's clock, to place them in time)
        self.stream = names.samples_stream
        self.acked: dict[int, float] = {}  # stored sequence -> when the ack was seen
        self.duplicate_acks = 0  # acks saying "duplicate": a retried publish de-duplicated
        self._nc = None

    async def start(self) -> None:
        async def quiet(_: Exception) -> None:
            return None

        self._nc = await nats.connect(
            self.nats_url, name="bench-faults-tap", max_reconnect_attempts=-1,
            reconnect_time_wait=0.05, error_cb=quiet,
        )  # fmt: skip
        await self._nc.subscribe("_INBOX.>", cb=self._on_reply)

    async def _on_reply(self, msg) -> None:
        data = msg.data
        if not data.startswith(b'{"stream"'):
            return
        with contextlib.suppress(orjson.JSONDecodeError):
            ack = orjson.loads(data)
            if ack.get("stream") == self.stream and isinstance(ack.get("seq"), int):
                if ack.get("duplicate"):
                    self.duplicate_acks += 1
                else:
                    self.acked.setdefault(ack["seq"], self.clock())

    async def stop(self) -> None:
        if self._nc is not None:
            await self._nc.close()

    async def wait_trained(self, timeout_s: float = 120.0, quiet_s: float = 1.5) -> bool:
        """Wait until no sample ack came for ``quiet_s`` (the gateways published what they
        held: they linger 50 ms, then wait for the ack) and the trainer's consumer has
        nothing pending or unacknowledged."""
        js = self._nc.jetstream()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            last = max(self.acked.values(), default=-1e9)
            try:
                info = await js.consumer_info(self.stream, self.names.trainer_durable)
                drained = info.num_pending == 0 and info.num_ack_pending == 0
            except Exception:  # reconnecting
                drained = False
            if drained and self.clock() - last >= quiet_s:
                return True
            await asyncio.sleep(0.25)
        return False

    async def read_stream(self) -> tuple[dict[int, str], list[tuple[int, float]]]:
        """(sequence -> request id of every stored sample, (sequence, ack time) of each
        acknowledged sample missing from the stream)."""
        js = self._nc.jetstream()
        info = await js.stream_info(self.stream)
        out: dict[int, str] = {}
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                m = await js.get_msg(self.stream, seq)
            except NotFoundError:
                continue
            out[seq] = (m.headers or {}).get("Nats-Msg-Id", f"seq-{seq}")
        missing = sorted((seq, t) for seq, t in self.acked.items() if seq not in out)
        self.stream_state = {"first_seq": info.state.first_seq, "last_seq": info.state.last_seq,
                             "messages": info.state.messages}  # fmt: skip
        return out, missing

    @staticmethod
    def window_ids(trainer_admin_url: str) -> dict:
        with urllib.request.urlopen(trainer_admin_url + "/window/ids", timeout=30) as r:
            return json.loads(r.read())

    async def ledger(self, trainer_admin_url: str) -> tuple[Ledger, dict]:
        stored, missing = await self.read_stream()
        window = await asyncio.to_thread(self.window_ids, trainer_admin_url)
        ledger = Ledger(Counter(stored.values()), Counter(window["ids"]), tuple(missing))
        stats = {
            "stream_messages": len(stored),
            "acks_seen": len(self.acked),
            "stream_state": self.stream_state,
            "acked_missing_from_stream": len(missing),
            "acked_missing": [{"seq": s, "acked_at_s": round(t, 3)} for s, t in missing[:20]],
            "duplicate_acks": self.duplicate_acks,
            "window_size": len(window["ids"]),
            "window_evicted": window["evicted"],
        }
        return ledger, stats
