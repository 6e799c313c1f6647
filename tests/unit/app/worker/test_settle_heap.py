"""The worker's collector settings once it is built (``app.worker.factory.settle_heap``)."""

from __future__ import annotations

import gc

from app.worker.factory import GC_YOUNG_THRESHOLD, settle_heap


def test_the_built_worker_is_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        kept = object.__new__(type("Kept", (), {}))  # a container made before: frozen after
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # out of every generation
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
