"""services/gateway/api_keys.py: the key format, the stored hash and the strict key file."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from services.gateway.api_keys import (
    DEFAULT_PRIORITY,
    KeyFileError,
    KeyPolicy,
    RateLimit,
    dump_key_file,
    generate_key,
    key_digest,
    key_id_of,
    new_api_key,
    parse_key_file,
)


def test_keys_carry_a_public_id_and_256_random_bits():
    ids, keys = set(), set()
    for _ in range(200):
        key_id, key = generate_key()
        assert re.fullmatch(r"hr-[0-9a-f]{12}-[A-Za-z0-9_-]{43}", key)
        assert key_id_of(key) == key_id
        ids.add(key_id)
        keys.add(key)
    assert len(ids) == len(keys) == 200
    assert key_id_of("sk-something") is None
    assert key_id_of("hr-0123456789ab-short") is None


def test_the_stored_digest_is_sha256_of_the_key():
    _, key = generate_key()
    assert key_digest(key) == hashlib.sha256(key.encode()).digest()


def _file(**entry) -> str:
    _, key = generate_key()
    e = {"id": key_id_of(key), "name": "k", "sha256": key_digest(key).hex(), **entry}
    return json.dumps({"version": 1, "keys": [e]})


def test_a_json_file_parses_with_defaults():
    (k,) = parse_key_file(_file())
    assert k.policy == KeyPolicy()
    assert k.policy.models is None and k.policy.allows_model("anything")
    assert k.policy.priority == DEFAULT_PRIORITY == (-1000, 0)
    assert not k.policy.debug and k.policy.requests is None and k.policy.tokens is None


def test_a_full_policy_parses():
    text = _file(
        models=["meta-llama/*", "exact"], profiles=["llmd-predicted"],
        priority={"min": -5, "max": 5}, debug=True,
        rate_limits={"requests_per_minute": 60, "tokens_per_minute": 1000, "token_burst": 50},
    )  # fmt: skip
    (k,) = parse_key_file(text)
    p = k.policy
    assert p.allows_model("meta-llama/Llama-3.1-8B-Instruct") and p.allows_model("exact")
    assert not p.allows_model("exactly") and not p.allows_model("mistral/x")
    assert p.profiles == {"llmd-predicted"} and p.priority == (-5, 5) and p.debug
    assert p.requests == RateLimit(60, 60) and p.tokens == RateLimit(1000, 50)
    assert p.requests.interval_us == 1e6 and p.tokens.tolerance_us == 50 * 60e3


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"colour": "red"}, "unknown field"),
        ({"sha256": "abc"}, "'sha256' must be 64"),
        ({"id": "XYZ"}, "'id' must be 12"),
        ({"name": ""}, "'name' must match"),
        ({"models": "all"}, "'models' must be a list"),
        ({"priority": {"min": 1, "max": 0}}, "is above"),
        ({"priority": {"min": -2000}}, "priority.min"),
        ({"priority": {"low": 0}}, "'priority' must be"),
        ({"debug": "yes"}, "'debug' must be true or false"),
        ({"rate_limits": {"requests_per_minute": 0}}, ">= 1"),
        ({"rate_limits": {"request_burst": 5}}, "needs 'requests_per_minute'"),
        ({"rate_limits": {"rpm": 5}}, "unknown rate_limits field"),
    ],
)
def test_bad_entries_are_refused_naming_the_entry(entry, message):
    with pytest.raises(KeyFileError, match=message) as e:
        parse_key_file(_file(**entry), "keys.yaml")
    assert "keys.yaml: keys[0]" in str(e.value)


def test_duplicates_and_bad_documents_are_refused():
    a, _ = new_api_key("a", KeyPolicy())
    b, _ = new_api_key("a", KeyPolicy())
    with pytest.raises(KeyFileError, match="duplicate key name 'a'"):
        parse_key_file(dump_key_file([a, b]))
    with pytest.raises(KeyFileError, match="duplicate key id"):
        parse_key_file(dump_key_file([a, a]))
    with pytest.raises(KeyFileError, match="not valid YAML"):
        parse_key_file("keys: [")
    with pytest.raises(KeyFileError, match="not valid YAML/JSON"):
        parse_key_file('{"keys": [')
    with pytest.raises(KeyFileError, match="unsupported version"):
        parse_key_file("version: 2\nkeys: []\n")
    with pytest.raises(KeyFileError, match="expected a mapping"):
        parse_key_file("- a\n")
    assert parse_key_file("") == [] and parse_key_file("version: 1\nkeys: []\n") == []


def test_dump_round_trips_and_holds_no_key():
    policy = KeyPolicy(models=("m1",), profiles=frozenset({"p"}), priority=(-3, 2), debug=True,
                       requests=RateLimit(10, 3), tokens=RateLimit(500, 500))  # fmt: skip
    rec, key = new_api_key("team-a", policy)
    other, _ = new_api_key("team-b", KeyPolicy())
    text = dump_key_file([rec, other])
    assert key not in text and key[16:] not in text
    assert parse_key_file(text) == [rec, other]
