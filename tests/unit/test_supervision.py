"""The launcher's restart backoff (pure, time passed in)."""

from __future__ import annotations

import pytest

from services.supervision import RestartPolicy, RestartState


def test_first_exit_waits_initial_then_doubles_after_short_runs_up_to_the_cap():
    st = RestartState(RestartPolicy(initial_s=0.5, max_s=4.0, stable_s=30.0), started_at=0.0)
    now, delays = 1.0, []
    for _ in range(6):  # crashes right after each start
        delays.append(st.exited(now))
        assert not st.due(now + delays[-1] - 0.01) and st.due(now + delays[-1])
        now += delays[-1]
        st.restarted(now)
        now += 0.1
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert st.restarts == 6


def test_a_stable_run_resets_the_backoff():
    st = RestartState(RestartPolicy(initial_s=0.5, max_s=10.0, stable_s=30.0), started_at=0.0)
    assert st.exited(1.0) == 0.5
    st.restarted(1.5)
    assert st.exited(2.0) == 1.0
    st.restarted(3.0)
    assert st.exited(3.0 + 30.0) == 0.5  # it ran 30 s: a fresh start


def test_nothing_is_due_while_running():
    st = RestartState(RestartPolicy(), started_at=0.0)
    assert not st.due(1e9)
    st.exited(5.0)
    st.restarted(6.0)
    assert not st.due(1e9) and st.restart_at is None


@pytest.mark.parametrize(("i", "m", "s"), [(0.0, 1.0, 1.0), (2.0, 1.0, 1.0), (1.0, 2.0, 0.0)])
def test_bad_policy(i, m, s):
    with pytest.raises(ValueError):
        RestartPolicy(i, m, s)
