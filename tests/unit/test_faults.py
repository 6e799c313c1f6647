"""The fault-injection plan used by the fault tests (``app/faults.py``)."""

from __future__ import annotations

import pytest

from app import faults
from app.settings import Settings, SettingsError


@pytest.mark.parametrize(
    "spec, point, action, at",
    [
        ("commit=lose-response@5", "commit", "lose-response", 5),
        ("commit=lose-request@1", "commit", "lose-request", 1),
        ("commit=pause@1", "commit", "pause", 1),
        ("commit=roll-back@30", "commit", "roll-back", 30),
        ("processed=kill@100", "processed", "kill", 100),
        ("committed=kill@2", "committed", "kill", 2),
        ("assigned=term@1", "assigned", "term", 1),
        ("processed=skip-fetched@200", "processed", "skip-fetched", 200),
    ],
)
def test_parse(spec: str, point: str, action: str, at: int) -> None:
    plan = faults.parse(spec)
    assert plan is not None
    assert (plan.point, plan.action, plan.at) == (point, action, at)


@pytest.mark.parametrize(
    "spec",
    [
        "commit",
        "commit=kill",
        "nowhere=kill@1",
        "commit=explode@1",
        "processed=lose-request@1",
        "commit=skip-fetched@1",
        "sent=pause@1",
        "committed=roll-back@1",
    ],
)
def test_malformed_plans_are_refused_at_start_up(spec: str) -> None:
    with pytest.raises(ValueError):
        faults.parse(spec)
    with pytest.raises(SettingsError, match="DEDUPE_FAULT_INJECTION"):
        Settings.from_env({"DEDUPE_FAULT_INJECTION": spec})


def test_empty_means_no_faults() -> None:
    assert faults.parse("") is None


def test_a_plan_fires_once_at_the_nth_visit_of_its_point() -> None:
    plan = faults.parse("commit=lose-response@3")
    assert plan is not None
    seen = [plan.reach(p) for p in ["commit", "processed", "commit", "commit", "commit"]]
    assert seen == [None, None, None, "lose-response", None]


def test_a_roll_back_kills_the_worker_once_the_stores_applied_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed: list[int] = []
    monkeypatch.setattr(faults.os, "kill", lambda pid, sig: killed.append(sig))
    plan = faults.parse("commit=roll-back@2")
    assert plan is not None
    plan.after_applied(1)  # an earlier commit: nothing
    assert [plan.reach("commit"), plan.reach("commit")] == [None, "roll-back"]
    plan.after_applied(2)  # another partition's commit, while the roll-back runs: nothing
    assert killed == []
    plan.rolled_back = 1  # the committer, once it aborted and reports the commit
    plan.after_applied(1)
    assert killed == [faults.signal.SIGKILL]
