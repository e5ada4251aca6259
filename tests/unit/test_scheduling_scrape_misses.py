"""A failed scrape does not take a pod that served recently out of rotation: through the
tolerated number of misses its last good record stays (as a stale one: the gateway's own
counts); a connection failure or one miss more makes it not ready
(services/gateway/scheduling/scrape_misses.py, applied by the pod view)."""

from __future__ import annotations

import pytest

from services.gateway.scheduling.pod_view import PodView
from services.gateway.scheduling.scrape_misses import ScrapeMisses
from services.gateway.settings import GatewaySettings
from shared.schemas import PodRecord, PodSnapshot

MODEL = "m"


def good(name="a", at=100.0, waiting=1.0):
    return PodRecord(name=name, url=f"http://{name}", ready=True, scraped_at=at,
                     models=[MODEL], waiting=waiting)  # fmt: skip


def failed(name="a", at=101.0, reason: str | None = "timeout"):
    return PodRecord(name=name, url=f"http://{name}", ready=False, scraped_at=at,
                     error=f"{reason}: ...", error_reason=reason)  # fmt: skip


# --- the rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reason", "served", "kept"),
    [
        ("timeout", True, True),
        ("http_error", True, True),  # reset mid-response
        ("http_status", True, True),
        ("no_metrics", True, True),
        ("connect", True, False),  # refused / unreachable: down now
        ("timeout", False, False),  # did not serve recently: no evidence it lives
        (None, True, False),  # no reason (older collector, hand-made record): as reported
    ],
)
def test_one_failed_scrape(reason, served, kept):
    m = ScrapeMisses(tolerated=3)
    g = good()
    assert m.admit(g, False) is g
    out = m.admit(failed(reason=reason), served)
    assert (out is g) == kept and (("a" in m.kept) == kept)
    assert out.ready == kept


def test_misses_count_per_scrape_not_per_snapshot_and_the_next_one_is_too_many():
    m = ScrapeMisses(tolerated=2)
    g = good()
    m.admit(g, False)
    first = failed(at=101.0)
    for _ in range(5):  # the collector repeats the record in every snapshot
        assert m.admit(first, True) is g
    assert m.misses("a") == 1
    assert m.admit(failed(at=102.0), True) is g and m.misses("a") == 2
    third = failed(at=103.0)
    assert m.admit(third, True) is third and "a" not in m.kept  # over the tolerance
    assert m.admit(third, True) is third  # and stays not ready
    assert m.admit(failed(at=104.0), True).ready is False
    back = good(at=105.0)
    assert m.admit(back, False) is back and m.misses("a") == 0  # a good scrape resets
    assert m.admit(failed(at=106.0), True) is back


def test_a_pod_that_stops_serving_or_is_refused_turns_not_ready_within_the_tolerance():
    m = ScrapeMisses(tolerated=5)
    g = good()
    m.admit(g, False)
    assert m.admit(failed(at=101.0), True) is g
    assert m.admit(failed(at=101.0), False).ready is False  # no longer serving
    m.admit(good(at=102.0), False)
    assert m.admit(failed(at=103.0), True).ready
    assert m.admit(failed(at=104.0, reason="connect"), True).ready is False


def test_never_ready_pods_stay_as_reported_and_tolerance_zero_is_the_old_behaviour():
    m = ScrapeMisses(tolerated=3)
    pending = failed(reason="pending")
    assert m.admit(pending, True) is pending
    z = ScrapeMisses(tolerated=0)
    z.admit(good(), False)
    assert z.admit(failed(), True).ready is False


def test_pods_that_leave_are_forgotten():
    m = ScrapeMisses(tolerated=3)
    m.admit(good("a"), False)
    m.admit(failed("a"), True)
    m.retain(["b"])
    assert not m.kept and m.misses("a") == 0
    again = failed("a", at=102.0)
    assert m.admit(again, True) is again  # no good record remembered


# --- in the pod view --------------------------------------------------------------------
def snap(ts, *pods):
    return PodSnapshot(pool="p", ts=ts, pods=list(pods))


def test_view_keeps_a_serving_pod_routable_on_its_own_counts():
    v = PodView(stale_after_s=2.0, scrape_misses_tolerated=2, served_recently_s=10.0)
    v.apply_snapshot(snap(100.0, good("a", waiting=7.0), good("b")))
    v.on_dispatch("r1", "a", 100, 10, now=100.1)
    v.on_first_token("r1", now=100.2)  # a served: one request decodes there
    v.on_dispatch("r2", "a", 50, 10, now=100.3)
    v.apply_snapshot(snap(101.5, failed("a", at=101.5), failed("b", at=101.5)))
    assert [c.name for c in v.candidates(MODEL, 101.6)] == ["a"]  # b never served here
    (c,) = v.candidates(MODEL, 101.6)
    assert c.stale  # the scraped waiting=7 is not trusted: the gateway's own counts
    assert (c.load.waiting, c.load.running, c.in_flight) == (1.0, 1.0, 2)
    counts = v.counts(101.6)
    assert (counts.ready, counts.not_ready, counts.stale, counts.missed) == (1, 1, 1, 1)
    v.apply_snapshot(snap(102.5, failed("a", at=102.5), good("b", at=102.5)))
    assert v.counts(102.6).missed == 1
    v.apply_snapshot(snap(103.5, failed("a", at=103.5), good("b", at=103.5)))  # 3rd miss
    assert [c.name for c in v.candidates(MODEL, 103.6)] == ["b"]
    assert v.counts(103.6).missed == 0


def test_view_served_recently_by_a_recent_first_token():
    v = PodView(scrape_misses_tolerated=3, served_recently_s=5.0)
    v.apply_snapshot(snap(100.0, good("a")))
    v.on_dispatch("r1", "a", 10, 2, now=100.0)
    v.on_first_token("r1", now=100.1)
    v.on_finish("r1")  # nothing decodes now; the first token was 0.9 s ago
    assert v.served_recently("a", 101.0) and not v.served_recently("a", 105.2)
    v.apply_snapshot(snap(101.0, failed("a", at=101.0)))
    assert v.record("a").ready
    v.apply_snapshot(snap(106.0, failed("a", at=106.0)))  # 5.9 s since it served
    assert not v.record("a").ready


def test_the_gateway_and_the_lab_build_the_view_from_the_settings():
    s = GatewaySettings(stale_after_s=3.0, scrape_misses_tolerated=1, served_recently_s=4.0)
    v = PodView.from_settings(s)
    assert (v.stale_after_s, v.misses.tolerated, v.served_recently_s) == (3.0, 1, 4.0)
