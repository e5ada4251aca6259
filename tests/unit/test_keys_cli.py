"""`headroom keys add|list|revoke` (services/keys_cli.py) on a real file."""

from __future__ import annotations

import stat

import pytest

from services.gateway.api_keys import key_digest, key_id_of, parse_key_file
from services.gateway.auth import KeyRing
from services.keys_cli import main


def _add(path, capsys, *args: str) -> str:
    assert main(["--file", str(path), "add", *args]) == 0
    out = capsys.readouterr()
    assert out.out.count("\n") == 1  # stdout is the key alone: KEY=$(headroom keys add ...)
    return out.out.strip()


def test_add_prints_the_key_once_and_stores_only_its_hash(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    key = _add(path, capsys, "--name", "team-a", "--models", "meta-llama/*,exact",
               "--profiles", "round-robin", "--priority-max", "3", "--debug",
               "--requests-per-minute", "60", "--tokens-per-minute", "1000",
               "--token-burst", "200")  # fmt: skip
    text = path.read_text()
    assert key not in text and key[16:] not in text
    assert key_digest(key).hex() in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (rec,) = parse_key_file(text)
    assert rec.id == key_id_of(key) and KeyRing([rec]).verify(key) is rec
    p = rec.policy
    assert p.models == ("meta-llama/*", "exact") and p.profiles == {"round-robin"}
    assert p.priority == (-1000, 3) and p.debug
    assert (p.requests.per_minute, p.requests.burst) == (60, 60)
    assert (p.tokens.per_minute, p.tokens.burst) == (1000, 200)


def test_list_never_shows_a_key_or_its_hash(tmp_path, capsys):
    path = tmp_path / "keys.yaml"
    k1 = _add(path, capsys, "--name", "a")
    k2 = _add(path, capsys, "--name", "b", "--requests-per-minute", "5")
    for args in ([], ["--json"]):
        assert main(["--file", str(path), "list", *args]) == 0
        out = capsys.readouterr().out
        assert key_id_of(k1) in out and key_id_of(k2) in out and "requests_per_minute" in out
        for secret in (k1, k2, k1[16:], key_digest(k1).hex(), key_digest(k2).hex()):
            assert secret not in out


def test_revoke_by_id_or_name_and_refusals(tmp_path, capsys, monkeypatch):
    path = tmp_path / "keys.yaml"
    k1 = _add(path, capsys, "--name", "a")
    k2 = _add(path, capsys, "--name", "b")
    assert main(["--file", str(path), "add", "--name", "a"]) == 1  # names are unique
    assert main(["--file", str(path), "revoke", key_id_of(k1)]) == 0
    assert main(["--file", str(path), "revoke", "b"]) == 0
    assert main(["--file", str(path), "revoke", "b"]) == 1
    assert parse_key_file(path.read_text()) == []
    assert KeyRing(parse_key_file(path.read_text())).verify(k2) is None
    capsys.readouterr()
    # a bad policy is refused before anything is written
    assert main(["--file", str(path), "add", "--name", "c", "--requests-per-minute", "0"]) == 1
    assert ">= 1" in capsys.readouterr().err and parse_key_file(path.read_text()) == []
    # the file comes from HEADROOM_GATEWAY_API_KEYS_PATH by default; without it, a usage error
    monkeypatch.setenv("HEADROOM_GATEWAY_API_KEYS_PATH", str(path))
    assert main(["list"]) == 0
    monkeypatch.delenv("HEADROOM_GATEWAY_API_KEYS_PATH")
    assert main(["list"]) == 2


def test_the_headroom_command_routes_to_it(tmp_path, capsys):
    from services.cli import main as headroom

    with pytest.raises(SystemExit) as e:
        headroom(["keys", "--file", str(tmp_path / "k.yaml"), "add", "--name", "x"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("hr-")
