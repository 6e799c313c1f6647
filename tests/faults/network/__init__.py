"""Network faults between the clients and the broker, through the fault proxy
(``tests/faults/proxy.py``): F9 a worker partitioned from the broker (both directions, and one
direction only), F9a latency spikes of seconds on every request, F9b connection resets in the
middle of commits, F15 a transaction the broker aborts on its timeout while the worker is
stopped, F18 the ingest service's link to Kafka cut while the Segment SDK retries. Each during
a flowing stream, each ending exactly once (the verifier, ``drain_and_verify``).

These tests run on a broker of their own (port ``DEDUPE_TEST_KAFKA_PORT`` + 10, controller + 11,
started by ``net`` in conftest.py and stopped after the package's last test), whose extra
listeners ``L0..L3`` listen on +12, +14, +16, +18 and advertise +13, +15, +17, +19, where the
links' proxies listen: a client that bootstraps through a proxy is told to connect to the proxy
again, so every one of its connections goes through the link. The tier's shared broker cannot
serve: it is started once and left running across tiers and sessions, without those listeners.

How to run: ``make test-faults`` (the whole tier), or
``DEDUPE_TEST_KAFKA_PORT=19092 .venv/bin/python -m pytest -q -s tests/faults/network``.
Each test prints its figures and the proxy's (connections, resets, bytes dropped).
"""
