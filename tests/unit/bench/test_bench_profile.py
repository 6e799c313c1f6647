"""``bench.profile``: summaries of py-spy's collapsed stacks."""

from __future__ import annotations

from bench.profile import frame_name, parse, summary

RAW = [
    "<module> (app/__main__.py:3);run (asyncio/runners.py:118);"
    "EpollSelector.select (selectors.py:468) 50\n",
    "<module> (app/__main__.py:3);dedupe_events (app/worker/agents.py:117);"
    "loads (json/__init__.py:346) 30\n",
    "<module> (app/__main__.py:3);dedupe_events (app/worker/agents.py:120);"
    "send (/x/.venv/lib/python3.11/site-packages/aiokafka/producer/producer.py:450) 20\n",
    "garbage without a count\n",
]


def test_frame_names_fold_lines_and_site_packages() -> None:
    assert frame_name("send (/v/lib/python3.11/site-packages/aiokafka/p.py:12)") == (
        "send (aiokafka/p.py)"
    )
    assert (
        frame_name("dedupe_events (app/worker/agents.py:117)")
        == "dedupe_events (app/worker/agents.py)"
    )
    assert frame_name("<unknown>") == "<unknown>"


def test_self_and_total_shares() -> None:
    p = parse(RAW)
    assert p.samples == 100
    assert p.self_["EpollSelector.select (selectors.py)"] == 50
    assert p.self_["loads (json/__init__.py)"] == 30
    # both lines of dedupe_events count once each for total, folded across line numbers
    assert p.total["dedupe_events (app/worker/agents.py)"] == 50
    assert p.total["<module> (app/__main__.py)"] == 100
    text = summary(p)
    assert "idle (event loop or thread waiting) 50.0%" in text
    assert " 30.0%   50.0%  loads" not in text  # self first, then total, per row
    assert " 30.0%   30.0%  loads (json/__init__.py)" in text


def test_under_keeps_only_stacks_through_a_frame() -> None:
    p = parse(RAW, under="dedupe_events")
    assert p.samples == 50
    assert "EpollSelector.select (selectors.py)" not in p.self_


def test_empty_profile() -> None:
    assert summary(parse([])) == "no samples\n"
