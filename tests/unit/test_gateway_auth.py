"""services/gateway/auth.py: key verification and the privileged-header policy, table-driven."""

from __future__ import annotations

import pytest

from services.gateway.api_keys import KeyPolicy, generate_key, key_id_of, new_api_key
from services.gateway.auth import (
    ALLOW_ALL,
    IGNORE_ALL,
    REJECT_ALL,
    HeaderPolicy,
    KeyRing,
    authenticate,
    bearer_token,
    objectives_for,
)
from services.gateway.errors import GatewayError

PROFILES = ("headroom", "llmd-predicted", "round-robin")
ACTIVE = "headroom"


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER  abc ", "abc"),
        ("Basic abc", None), ("Bearer", None), ("Bearer ", None), ("abc", None), (None, None),
    ],
)  # fmt: skip
def test_bearer_token(value, token):
    assert bearer_token({} if value is None else {"authorization": value}) == token


def test_verify_accepts_only_the_exact_key():
    rec, key = new_api_key("a", KeyPolicy())
    other, other_key = new_api_key("b", KeyPolicy())
    ring = KeyRing([rec, other])
    assert ring.verify(key) is rec and ring.verify(other_key) is other
    # right id, wrong secret; unknown id; not our format; a prefix of the key
    forged = f"hr-{rec.id}-{other_key[16:]}"
    _, unknown = generate_key()
    for bad in (forged, unknown, "sk-123", key[:-1], key + "x", ""):
        assert ring.verify(bad) is None, bad
    assert key_id_of(forged) == rec.id


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "You didn't provide an API key"),
        ({"authorization": "Basic dTpw"}, "You didn't provide an API key"),
        ({"authorization": "Bearer hr-0123456789ab-" + "x" * 43}, "Incorrect API key provided"),
    ],
)
def test_authenticate_401_is_openai_shaped_and_echoes_no_key(headers, message):
    ring = KeyRing([new_api_key("a", KeyPolicy())[0]])
    with pytest.raises(GatewayError) as e:
        authenticate(ring, headers)
    err = e.value
    assert err.status == 401 and err.code == "invalid_api_key"
    assert err.message.startswith(message)
    assert err.headers["WWW-Authenticate"].startswith("Bearer")
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}
    assert "x" * 8 not in err.message and "hr-" not in err.message


KEY = HeaderPolicy.for_key(
    KeyPolicy(profiles=frozenset({"llmd-predicted"}), priority=(-10, 5), debug=False)
)
DEBUG_KEY = HeaderPolicy.for_key(KeyPolicy(debug=True))
P, PR, D = "x-headroom-profile", "x-headroom-priority", "x-headroom-debug"

# (policy, headers, expected (profile, priority, debug) or the 403's param)
CASES = [
    (ALLOW_ALL, {P: "round-robin", PR: "1000", D: "1"}, ("round-robin", 1000, True)),
    (ALLOW_ALL, {}, (None, None, False)),
    (IGNORE_ALL, {P: "round-robin", PR: "1000", D: "1"}, (None, None, False)),
    (IGNORE_ALL, {P: "no-such", PR: "nonsense"}, (None, None, False)),  # dropped unread
    (REJECT_ALL, {P: "round-robin"}, P),
    (REJECT_ALL, {P: ACTIVE}, (ACTIVE, None, False)),  # the active profile is no privilege
    (REJECT_ALL, {PR: "-1"}, PR),
    (REJECT_ALL, {D: "1"}, D),
    (REJECT_ALL, {D: "0"}, (None, None, False)),
    (KEY, {P: "llmd-predicted", PR: "5"}, ("llmd-predicted", 5, False)),
    (KEY, {PR: "-10"}, (None, -10, False)),
    (KEY, {P: "round-robin"}, P),
    (KEY, {PR: "6"}, PR),
    (KEY, {PR: "-11"}, PR),
    (KEY, {D: "true"}, D),
    (DEBUG_KEY, {D: "true"}, (None, None, True)),
    (DEBUG_KEY, {PR: "1"}, PR),  # default key range -1000..0
]


@pytest.mark.parametrize(("policy", "headers", "expected"), CASES)
def test_privileged_header_policy(policy, headers, expected):
    headers = {"x-llm-d-slo-ttft-ms": "500", **headers}
    if isinstance(expected, str):
        with pytest.raises(GatewayError) as e:
            objectives_for(headers, policy, PROFILES, ACTIVE)
        assert e.value.status == 403 and e.value.param == expected
        assert e.value.code == "permission_denied" and expected in e.value.message
        return
    obj, debug = objectives_for(headers, policy, PROFILES, ACTIVE)
    assert (obj.profile, obj.priority, debug) == expected
    assert obj.slo_ttft_ms == 500  # SLO headers are nobody's privilege


def test_malformed_headers_stay_400_under_every_enforcing_policy():
    for policy in (ALLOW_ALL, REJECT_ALL, KEY):
        with pytest.raises(GatewayError) as e:
            objectives_for({PR: "high"}, policy, PROFILES, ACTIVE)
        assert e.value.status == 400
