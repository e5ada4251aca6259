"""services/gateway/ratelimit.py, the pure part: what a request costs and the 429s."""

from __future__ import annotations

from services.gateway.api_keys import KeyPolicy, RateLimit, new_api_key
from services.gateway.ratelimit import Charge, charges, rate_limited, retry_after_s, too_large


def test_charges_follow_the_keys_limits():
    none, _ = new_api_key("a", KeyPolicy())
    both, _ = new_api_key("b", KeyPolicy(requests=RateLimit(60, 10), tokens=RateLimit(1000, 500)))
    assert charges(none, None) == []
    assert charges(both, 42) == [
        Charge("requests", RateLimit(60, 10), 1),
        Charge("tokens", RateLimit(1000, 500), 42),
    ]


def test_retry_after_rounds_up_to_whole_seconds():
    assert [retry_after_s(us) for us in (1, 999_999, 1_000_000, 1_000_001, 0)] == [1, 1, 1, 2, 1]


def test_429_bodies_and_headers_are_openai_shaped():
    c = Charge("tokens", RateLimit(1000, 500), 300)
    e = rate_limited(c, 2_500_000, {"tokens": -7})
    assert e.status == 429 and e.type == "tokens" and e.code == "rate_limit_exceeded"
    assert e.headers == {
        "Retry-After": "3", "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2.500s",
    }  # fmt: skip
    assert "TPM" in e.message and "2.5s" in e.message
    big = too_large(Charge("tokens", RateLimit(1000, 500), 501))
    assert (
        big.status == 429 and big.code == "request_too_large" and "Retry-After" not in big.headers
    )
