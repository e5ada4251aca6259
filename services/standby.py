"""A warm spare of a service for the dev launcher: ``python -m services.standby SERVICE``.

Most of a service's start-up is Python importing its modules (the predictor: numpy, xgboost
and scipy, the NATS and Redis clients, aiohttp, pydantic; ~2 s of CPU, 8-12 s of wall time
on a loaded 2-core box), not connecting or loading a model (milliseconds). A spare pays
that once, ahead of time: it imports ``services.SERVICE.main`` and then blocks on one line
of stdin, without CPU, until the launcher hands it the environment of a replica that exited
(a JSON object); it then takes that environment and runs the service's ``main()``, exactly
as ``python -m services.SERVICE`` would. Settings are read in ``main()``, never at import,
so the replica's settings (its id, its admin port) are the ones it runs with. An empty line
or end of input ends the spare without running anything.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

SERVICES = ("collector", "gateway", "predictor", "simulator", "trainer")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in SERVICES:
        print(f"usage: python -m services.standby {{{','.join(SERVICES)}}}", file=sys.stderr)
        return 2
    entry = importlib.import_module(f"services.{args[0]}.main").main
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    env = json.loads(line)
    if not isinstance(env, dict):
        print("services.standby: expected a JSON object of environment variables", file=sys.stderr)
        return 2
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    sys.stdin.close()
    sys.argv = [f"services.{args[0]}"]
    entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())
