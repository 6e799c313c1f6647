"""The worker's Faust app, built from the environment (see ``app/settings/``).

Run a worker (what the Procfile's ``worker:`` line does)::

    python -m app worker -l info

You should see Faust's start-up banner, "transactional producers ready for N partitions", and
then the worker processing ``$DEDUPE_INPUT_TOPIC`` into ``$DEDUPE_OUTPUT_TOPIC``.
"""

from __future__ import annotations

from app.settings import Settings
from app.worker.factory import create_app

pipeline = create_app(Settings.from_env())
app = pipeline.app
