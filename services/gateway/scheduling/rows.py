"""Per-request scheduling inputs: prefix scores, feature rows and prefix-index sizes for every
candidate pod.

Rows come only from :func:`shared.features.build_row`, one per candidate, in candidate order;
the chosen pod's exact row is what the training sample carries.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.gateway.scheduling.cost_model import CostModel
from services.gateway.scheduling.pod_view import Candidate
from services.gateway.scheduling.prefix_index import PrefixIndex
from shared.features import RowContext, build_row


@dataclass(frozen=True, slots=True)
class CandidateRows:
    candidates: list[Candidate]
    prefix_scores: list[float]
    rows: list[list[float]]
    cached_blocks: list[int] | None = None  # prefix-index blocks per pod (None: unknown)
    service_s: list[float] | None = None  # estimated own prefill seconds per pod (cost model)

    def uncached_tokens(self, i: int, input_tokens: int) -> float:
        """Prompt tokens candidate ``i`` is expected to prefill (not covered by its cache)."""
        return (1.0 - self.prefix_scores[i]) * input_tokens


def build_candidate_rows(
    candidates: Sequence[Candidate],
    input_tokens: int,
    hashes: Sequence[int],
    index: PrefixIndex,
    cost: CostModel | None = None,
    *,
    max_tokens: int = 0,
    gateway_queued: int = 0,
) -> CandidateRows:
    """Rows, prefix scores and index sizes per candidate; with ``cost``, also the estimated
    seconds each pod needs to prefill the prompt's part it does not have cached (its
    hardware class's cost model). The rows'
    v2 columns take the request's ``max_tokens``, the pod view's estimates per candidate
    and ``gateway_queued`` (requests held in the gateway's flow-control queue); the v3
    column the candidate's hardware class."""
    cands = list(candidates)
    scores = index.scores((c.name for c in cands), hashes)
    service = None
    if cost is not None:
        service = [
            cost.for_class(c.hardware_class).estimate((1.0 - s) * input_tokens, s * input_tokens)
            for c, s in zip(cands, scores, strict=True)
        ]
    rows = []
    for i, (c, s) in enumerate(zip(cands, scores, strict=True)):
        ctx = RowContext(
            max_tokens, service[i] if service else 0.0, c.backlog_s, c.protected_decodes,
            gateway_queued, c.hardware_class,
        )  # fmt: skip
        rows.append(build_row(input_tokens, s, c.load, ctx))
    return CandidateRows(cands, scores, rows, [index.blocks(c.name) for c in cands], service)
