"""The ingest benchmark's limit: a bare HTTP handler that only produces to Kafka.

    python -m bench.ingest_bare --bootstrap B --topic T --port P

``POST /v1/track`` (one event) and ``POST /v1/batch`` (``{"batch": [...]}``): the body read
(gunzipped when ``Content-Encoding: gzip``), parsed, each event produced as compact JSON keyed
by its ``messageId``, and ``{"success": true}`` answered once Kafka acknowledged every event,
with the producer the ingest service uses (acks=all, idempotent, the same linger and batch
size, its placement and its JSON library: ``ingest/sink.py``). Nothing else: no write key, no
validation, no enrichment, no limits, no metrics. What the service does beyond this is what
the benchmark prices (``bench/ingest.py``). SIGTERM stops it (status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import signal

import orjson
from aiohttp import web
from aiokafka import AIOKafkaProducer

from app import rules
from ingest.settings import IngestSettings


def events_of(kind: str, body: dict[str, object]) -> list[dict[str, object]]:
    if kind == "batch":
        batch = body.get("batch")
        return [e for e in batch if isinstance(e, dict)] if isinstance(batch, list) else []
    return [body]


async def serve(bootstrap: str, topic: str, port: int) -> None:
    linger = IngestSettings.from_env({}).linger  # the service's default linger
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=int(linger * 1000),
        max_batch_size=512 * 1024,
        max_request_size=4 * 1024 * 1024,
    )
    await producer.start()
    partitions = len(await producer.partitions_for(topic))

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        events = events_of(request.match_info["kind"], orjson.loads(raw))
        keys = [str(e.get("messageId", "")).encode() for e in events]
        homes = rules.partitions_for(keys, partitions)
        sends = [
            await producer.send(topic, orjson.dumps(e), key=k, partition=p)
            for e, k, p in zip(events, keys, homes, strict=True)
        ]
        await asyncio.gather(*sends)
        return web.json_response({"success": True})

    app = web.Application(handler_args={"auto_decompress": False})
    app.router.add_post("/v1/{kind:track|batch}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"bare handler on http://127.0.0.1:{port} producing to {topic!r}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.bootstrap, args.topic, args.port))


if __name__ == "__main__":
    main()
