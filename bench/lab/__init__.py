"""The routing lab: replay a trace against simulated pods in virtual time through the real
scheduling, training and prediction code (docs/benchmarks.md, "Routing lab").

    from bench.lab import LabConfig, run_lab
    report = run_lab(LabConfig(trace="mooncake.jsonl", policy="headroom", pods=8))
"""

from bench.lab.config import LabConfig
from bench.lab.run import run_lab

__all__ = ["LabConfig", "run_lab"]
