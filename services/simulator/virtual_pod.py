"""One engine stepped in virtual time, the way the pod server's driver steps it in real time.

While the engine has work a step starts when the previous one ends; an idle engine starts
stepping when a request arrives (:meth:`VirtualPod.kick`). The caller owns the clock and the
event queue: after :meth:`kick` or :meth:`finish` started a step, it schedules
:meth:`finish` at :attr:`step_end`. The routing lab (many pods, one heap) and ``headroom sim
inference-perf`` (one pod, one client) drive their engines through this class.
"""

from __future__ import annotations

from services.simulator.engine import Engine, StepOutcome

INF = float("inf")


class VirtualPod:
    __slots__ = ("_out", "engine", "step_end")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.step_end = INF  # when the step in progress ends (INF: none)
        self._out: StepOutcome | None = None

    def fork(self, *, noise: bool = True) -> VirtualPod:
        """An independent copy: the engine forked (``noise``: see
        :meth:`services.simulator.engine.Engine.fork`), the step in progress (if any) kept."""
        new = VirtualPod(self.engine.fork(noise=noise))
        new.step_end, new._out = self.step_end, self._out  # StepOutcome is immutable
        return new

    @property
    def busy(self) -> bool:
        return self._out is not None

    def kick(self, now: float) -> bool:
        """Start stepping at ``now`` if no step is in progress and there is work (call it
        after a submit). True if a step started."""
        if self._out is None and self.engine.has_work():
            self._start(now)
            return True
        return False

    def finish(self) -> tuple[float, StepOutcome]:
        """End the step in progress at :attr:`step_end` and start the next one if work is
        left; returns the end time and the finished step's outcome (its tokens happen then)."""
        out, t = self._out, self.step_end
        if out is None:
            raise RuntimeError("no step in progress")
        self._out, self.step_end = None, INF
        if self.engine.has_work():
            self._start(t)
        return t, out

    def _start(self, now: float) -> None:
        out = self.engine.step(now)
        self._out, self.step_end = out, now + out.duration_s
