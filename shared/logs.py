"""Structured JSON logging, one line per record, set up by each service's entry point.

A record logged inside an OpenTelemetry span carries its ``trace_id`` and ``span_id`` (32 and
16 hex digits, as tracing backends show them) unless it names a ``trace_id`` itself.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson
from opentelemetry import trace


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        d = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("trace_id", "request_id", "pod"):
            val = getattr(record, key, None)
            if val is not None:
                d[key] = val
        if "trace_id" not in d:
            sc = trace.get_current_span().get_span_context()
            if sc.is_valid:
                d["trace_id"] = f"{sc.trace_id:032x}"
                d["span_id"] = f"{sc.span_id:016x}"
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(d).decode()


def setup_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
