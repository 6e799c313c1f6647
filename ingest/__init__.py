"""The stateless HTTP ingest service (the Procfile's ``web:`` process).

It speaks Segment's HTTP Tracking API and produces each event to the dedup worker's input
topic, keyed by messageId: ``ingest/app.py`` (the aiohttp app), ``ingest/request.py`` and
``ingest/events.py`` (the pure request and event rules), ``ingest/sink.py`` (the idempotent
producer), ``ingest/settings.py``. Run it with ``python -m ingest``.
"""
