"""SLO, priority and profile headers: good values, aliases, and 400s naming the header."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from services.gateway.errors import GatewayError
from services.gateway.request_headers import RequestObjectives, parse_objective_headers

PROFILES = {"headroom", "gie-default"}


def parse(h: dict[str, str], allow_profile: bool = True) -> RequestObjectives:
    return parse_objective_headers(Headers(h), PROFILES, allow_profile)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, RequestObjectives()),
        ({"x-llm-d-slo-ttft-ms": "500"}, RequestObjectives(500.0)),
        ({"X-LLM-D-SLO-TTFT-MS": "500", "x-llm-d-slo-tpot-ms": "25.5"},
         RequestObjectives(500.0, 25.5)),
        ({"x-slo-ttft-ms": "700", "x-slo-tpot-ms": " 30 "}, RequestObjectives(700.0, 30.0)),
        # the x-llm-d- header wins over its alias
        ({"x-llm-d-slo-ttft-ms": "500", "x-slo-ttft-ms": "700"}, RequestObjectives(500.0)),
        ({"x-llm-d-slo-ttft-ms": "1e3"}, RequestObjectives(1000.0)),
        ({"x-llm-d-slo-ttft-ms": "3600000"}, RequestObjectives(3_600_000.0)),
        ({"x-headroom-priority": "-1"}, RequestObjectives(priority=-1)),
        ({"x-headroom-priority": "+5"}, RequestObjectives(priority=5)),
        ({"x-headroom-profile": "gie-default"}, RequestObjectives(profile="gie-default")),
    ],
)  # fmt: skip
def test_good_headers(headers, expected):
    assert parse(headers) == expected


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"x-llm-d-slo-ttft-ms": "fast"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": ""}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "0"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "-5"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "nan"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "inf"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "1e400"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-ttft-ms": "3600001"}, "x-llm-d-slo-ttft-ms"),
        ({"x-llm-d-slo-tpot-ms": "1e12"}, "x-llm-d-slo-tpot-ms"),
        ({"x-slo-ttft-ms": "abc"}, "x-slo-ttft-ms"),
        ({"x-slo-tpot-ms": "-1"}, "x-slo-tpot-ms"),
        ({"x-headroom-priority": "1.5"}, "x-headroom-priority"),
        ({"x-headroom-priority": "high"}, "x-headroom-priority"),
        ({"x-headroom-priority": "5000"}, "x-headroom-priority"),
        ({"x-headroom-profile": "nope"}, "x-headroom-profile"),
    ],
)
def test_bad_headers_are_400_naming_the_header(headers, named):
    with pytest.raises(GatewayError) as e:
        parse(headers)
    err = e.value
    assert err.status == 400 and err.param == named and err.code == "invalid_header"
    assert f"'{named}'" in err.message


def test_profile_header_ignored_when_disabled():
    assert parse({"x-headroom-profile": "nope"}, allow_profile=False) == RequestObjectives()
