# Exactly-once event de-duplication. `make help` lists the targets.
#
# On a fresh machine:  make run   (set-up + local broker + worker in the foreground)
#                      make test  (lint + every test tier, on a real broker)

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
KAFKA := scripts/kafka-local.sh
SERVERS := scripts/servers.sh
IDEM_LIB := libs/idempotent-consumer
NATIVE := native
# Tests use their own broker port, so they never touch the broker of `make run`.
TEST_KAFKA_PORT ?= 19092
# `make test` runs three lanes side by side (see `test` below), each on brokers and worker web
# ports of its own, so that none meets another's broker restarts: the first on TEST_KAFKA_PORT
# (+20: its broker of the old transaction protocol), web ports from 17000; the second on
# OTHERS_KAFKA_PORT; the third's part of the fault tier on COMMIT_KAFKA_PORT (+20 likewise) and
# its network faults on their proxied brokers (NETFAULT_KAFKA_PORT, NETFAULT_KAFKA_V1_PORT; each
# with its listeners on the next eight ports). The Spark jobs of each lane serve metrics from
# ports of their own.
OTHERS_SPARK_METRICS_PORT ?= 19560
OTHERS_KAFKA_PORT ?= 19096
OTHERS_WEB_PORT_BASE ?= 23000
COMMIT_KAFKA_PORT ?= 19094
NETFAULT_KAFKA_PORT ?= 19102
NETFAULT_KAFKA_V1_PORT ?= 19122
THIRD_WEB_PORT_BASE ?= 21000
THIRD_SPARK_METRICS_PORT ?= 19540
# The security tier starts (and stops) its own SASL_SSL broker on this port (controller +1).
TEST_SECURE_KAFKA_PORT ?= 19192
# The cluster tier's controller port; its three brokers listen on the next three ports.
TEST_CLUSTER_PORT ?= 19300
# `make bench` starts its own broker on this port unless KAFKA_BOOTSTRAP_SERVERS is set.
BENCH_KAFKA_PORT ?= 29092
# `make bench-cluster` starts a three-broker cluster here (the controller; brokers on +1..+3).
BENCH_CLUSTER_PORT ?= 29300
# The browser tier's npm packages (tests/browser/package.json) and the bundled page, git-ignored.
BROWSER_DIR := .cache/browser

.DEFAULT_GOAL := help
.PHONY: soak help install kafka-jars kafka-up kafka-down kafka-acls run demo verify lint format \
        test test-unit test-integration test-faults test-spark test-ingest test-security web clean \
        test-cluster kafka-cluster-up kafka-cluster-down browser-install test-browser \
        spark-jars spark audit lake-optimize lake-vacuum bench bench-cluster bench-kstreams bench-scale bench-lake bench-recovery bench-ingest \
        servers-install servers-up servers-down test-idempotency bench-idempotency test-observe \
        test-prerequisites test-lane-faults test-lane-others test-lane-third test-faults-core \
        test-faults-commit test-faults-network alert-rules test-image lock

help: ## Show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(IDEM_LIB)/pyproject.toml $(NATIVE)/pyproject.toml $(NATIVE)/Cargo.toml $(NATIVE)/Cargo.lock $(wildcard $(NATIVE)/src/*.rs)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@command -v cargo >/dev/null || { echo "need cargo (Rust, e.g. from rustup) to build the native record path in $(NATIVE)/"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,bench]'
	$(PY) -m pip install --quiet -e '$(IDEM_LIB)[all,binary]'  # binary: psycopg's prebuilt build, as before 1.1
	# The native record path (adapters/fetched_records.py, adapters/built_batches.py): a wheel built by maturin with cargo.
	$(PY) -m pip install --quiet ./$(NATIVE)
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install the project with its dev tools

kafka-jars: ## Resolve the Kafka broker and tools jars from Maven Central (cached in .cache/)
	$(KAFKA) fetch

kafka-up: $(STAMP) kafka-jars ## Start a local single-node KRaft broker on 127.0.0.1:$KAFKA_PORT (9092), its controller on +1
	$(KAFKA) up

kafka-down: ## Stop the local broker on $KAFKA_PORT (9092) and its controller
	$(KAFKA) down

kafka-cluster-up: $(STAMP) kafka-jars ## Start a KRaft controller + 3 brokers with Kafka's defaults ($KAFKA_CLUSTER_PORT, 9300; brokers +1..+3)
	$(PY) -m scripts.kafka_cluster up

kafka-cluster-down: ## Stop the local three-broker cluster on $KAFKA_CLUSTER_PORT (9300)
	$(PY) -m scripts.kafka_cluster down

kafka-acls: $(STAMP) kafka-jars ## Print each component's Kafka ACLs; with KAFKA_SECURITY=sasl_ssl also add them to the local broker
	$(PY) -m scripts.kafka_acls $(if $(filter sasl_ssl,$(KAFKA_SECURITY)),--apply)

# The first run shows every strategy working: events without a messageId are deduplicated by
# fingerprint (the worker's own default dead-letters them); the demo sends such events only when
# its setting matches the worker's. An environment that sets DEDUPE_MISSING_ID keeps its value.
run demo: export DEDUPE_MISSING_ID ?= fingerprint

run: $(STAMP) kafka-jars ## Set up everything and run a worker in the foreground
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then $(KAFKA) up; fi
	$(PY) -m app worker

web: $(STAMP) ## Run the HTTP ingest service (Segment-compatible) on PORT (default 8080)
	$(PY) -m ingest

demo: $(STAMP) ## Send a realistic stream with client retries into the running pipeline
	$(PY) -m scripts.demo

verify: $(STAMP) ## Read the clean topic (read_committed): total, distinct ids, duplicates
	$(PY) -m scripts.verify

spark-jars: $(STAMP) ## Resolve Spark's Kafka connector and Delta Lake jars from Maven Central (.cache/spark-jars/)
	$(PY) -m spark.jars

spark: $(STAMP) spark-jars ## Run the Spark job: clean topic -> Delta lake ($DEDUPE_LAKE_DIR, ./lake)
	$(PY) -m spark.job

audit: $(STAMP) spark-jars ## Audit the lake (Spark batch job): rows, distinct messageIds, duplicates
	$(PY) -m spark.audit

lake-optimize: $(STAMP) spark-jars ## Compact the lake's Delta tables (Z-order: $DEDUPE_LAKE_ZORDER_BY); safe while the job runs
	$(PY) -m spark.upkeep optimize

lake-vacuum: $(STAMP) spark-jars ## Delete files the tables no longer use, older than $DEDUPE_LAKE_VACUUM_RETENTION (7d)
	$(PY) -m spark.upkeep vacuum

lint: $(STAMP) ## ruff format --check, ruff check, mypy (strict on the packages: pyproject.toml's [tool.mypy] files)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

format: $(STAMP) ## Format and auto-fix
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The JVMs the tests start (brokers, controllers, Spark, the Kafka Streams contender) compile
# with C1 alone (the java launcher reads JDK_JAVA_OPTIONS, and says so on stderr): each lives
# for a tier or a test, and on two cores C2's compiler threads cost more CPU than the code they
# speed up saves; `make test` is CPU-bound there, most of it in JVMs. Benchmarks and `make run`
# keep the JDK's default. A JDK_JAVA_OPTIONS of your own is kept.
test test-%: export JDK_JAVA_OPTIONS ?= -XX:TieredStopAtLevel=1

# Each tier is its own pytest run; a tier with no test files yet is skipped, not failed.
define pytest_tier
	@if find $(1) -name 'test_*.py' | grep -q .; then \
	  DEDUPE_TEST_KAFKA_PORT=$(TEST_KAFKA_PORT) $(PY) -m pytest --durations=25 $(1) $(2); \
	else echo "no tests in $(1)"; fi
endef

test-unit: $(STAMP) ## Unit tests (no broker)
	$(call pytest_tier,tests/unit,-q)

test-integration: $(STAMP) kafka-jars ## Integration tests on the real broker
	$(call pytest_tier,tests/integration,-q -s)

test-faults: $(STAMP) kafka-jars ## Fault tests: kill -9, restarts, fencing, broker pauses, network faults; every row on transactions v2, the commit's also on v1
	$(call pytest_tier,tests/faults,-q -s)

# `make test` runs the fault tier in three parts, in two lanes: the faults at the commit and the
# network faults (their own brokers, mostly waiting out timeouts) beside the rest.
FAULTS_AT_COMMIT := tests/faults/test_commit_outcome.py tests/faults/test_exact_points.py
test-faults-core: $(STAMP) kafka-jars
	$(call pytest_tier,tests/faults,-q -s --ignore=tests/faults/network \
	  $(addprefix --ignore=,$(FAULTS_AT_COMMIT)))

test-faults-commit: $(STAMP) kafka-jars
	$(call pytest_tier,$(FAULTS_AT_COMMIT),-q -s)

test-faults-network: $(STAMP) kafka-jars
	$(call pytest_tier,tests/faults/network,-q -s)

# -p no:hypothesispytest: the tier uses no Hypothesis, and the plugin's import at the end of the
# session, with the fault proxy's threads just stopped, crashed CPython 3.11.7's parser once
# ("AST constructor recursion depth mismatch") after every test had passed.
test-cluster: $(STAMP) kafka-jars spark-jars servers-install ## Cluster tier: 3 brokers, Kafka's defaults (19300-19303); leader, coordinator, controller kills, rolling restart, every client (C8)
	@DEDUPE_TEST_CLUSTER_PORT=$(TEST_CLUSTER_PORT) $(PY) -m pytest --durations=25 tests/cluster -q -s \
	  -p no:hypothesispytest

soak: $(STAMP) kafka-jars ## The fault and cluster tiers at 10x the events, not in make test (writes docs/soak.md)
	DEDUPE_FAULT_SCALE=10 $(MAKE) test-faults test-cluster

test-spark: $(STAMP) kafka-jars spark-jars ## Spark tests: transforms, audit, worker -> Spark -> lake, kill -9
	$(call pytest_tier,tests/spark,-q -s)

test-ingest: $(STAMP) kafka-jars ## HTTP ingest tests: real service, broker, workers, Segment SDK
	$(call pytest_tier,tests/ingest,-q -s)

test-security: $(STAMP) kafka-jars spark-jars ## Security tier: its own SASL_SSL broker with ACLs; each component as its own principal, refusals, kill -9
	@DEDUPE_TEST_SECURE_KAFKA_PORT=$(TEST_SECURE_KAFKA_PORT) $(PY) -m pytest --durations=10 tests/security -q -s

$(BROWSER_DIR)/.installed: tests/browser/package.json tests/browser/package-lock.json
	@command -v chromium >/dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	@command -v npm >/dev/null || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm; }
	mkdir -p $(BROWSER_DIR)
	cp tests/browser/package.json tests/browser/package-lock.json $(BROWSER_DIR)/
	cd $(BROWSER_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(BROWSER_DIR)/analytics.js: $(BROWSER_DIR)/.installed tests/browser/page.js
	cp tests/browser/page.js $(BROWSER_DIR)/page.js
	$(BROWSER_DIR)/node_modules/.bin/esbuild $(BROWSER_DIR)/page.js --bundle --format=iife \
	  --target=chrome120 --log-level=warning --outfile=$@

browser-install: $(BROWSER_DIR)/analytics.js ## Debian's chromium (apt-get, as root), the pinned analytics.js SDK and esbuild (npm), the page bundled

test-image: $(STAMP) kafka-jars spark-jars ## Image tier: each docker/Dockerfile stage built into a clean virtualenv from its COPY and pip lines, run as its user: ingest -> worker -> lake
	$(call pytest_tier,tests/image,-q -s)

lock: $(STAMP) ## Re-resolve the images' lock files (docker/requirements-*.txt) after a change to pyproject.toml's dependencies or either build backend; LOCK_ARGS=--upgrade to move every pin
	$(VENV)/bin/uv pip compile pyproject.toml docker/requirements-build.in --universal \
	  --python-version 3.11 --generate-hashes --quiet $(LOCK_ARGS) -o docker/requirements-app.txt
	$(VENV)/bin/uv pip compile pyproject.toml docker/requirements-build.in --extra spark --universal \
	  --python-version 3.11 --generate-hashes --quiet $(LOCK_ARGS) -o docker/requirements-spark.txt
	$(VENV)/bin/uv pip compile docker/requirements-native.in --universal --python-version 3.11 \
	  --generate-hashes --quiet $(LOCK_ARGS) -o docker/requirements-native.txt

test-browser: $(STAMP) kafka-jars browser-install ## Browser tier: analytics.js in headless Chromium from another origin, through an ingest crash, exactly once
	$(call pytest_tier,tests/browser,-q -s)

test-observe: $(STAMP) kafka-jars servers-install ## Observe tier: the alert rules' promtool tests; a real Prometheus (19490) pages for a killed and a stopped worker and a killed ingest
	$(call pytest_tier,tests/observe,-q -s)

alert-rules: ## The alert rules with runbook links under $RUNBOOK_BASE (default: the project's docs), to $ALERT_RULES_OUT or stdout
	@$(PY) -m scripts.alert_rules $(if $(RUNBOOK_BASE),--runbook-base '$(RUNBOOK_BASE)') \
	  $(if $(ALERT_RULES_OUT),--out '$(ALERT_RULES_OUT)')

servers-install: ## Install PostgreSQL, Redis and Prometheus from Debian's packages when missing (apt-get, as root)
	$(SERVERS) install

servers-up: ## Start the test PostgreSQL (:15432) and Redis (:16379); installs them with apt if missing
	$(SERVERS) up

servers-down: ## Stop the test PostgreSQL and Redis
	$(SERVERS) down

test-idempotency: $(STAMP) kafka-jars servers-install ## idempotent-consumer library: real PostgreSQL, Redis (started here), broker
	$(call pytest_tier,tests/idempotency,-q)

# Three lanes side by side, so `make test` takes about the longest lane rather than the sum
# (most of a fault test is waiting for timeouts, not CPU), balanced by what each tier takes when
# the three run at once: the fault tier's bulk, then the ingest tier; the integration tier and
# the lighter ones on its broker (idempotency, observe, browser), then the cluster and security
# tiers; the fault tier's faults at the commit and network faults, then the Spark tier. The ports of each are above. Everything
# the lanes need is installed first, so no two lanes fetch or apt-get at once. -Otarget: each
# lane's output is printed whole when it ends. One DEDUPE_REPORT_RUN dates the rows every lane
# publishes (tests/reliability.py).
test: export DEDUPE_REPORT_RUN := $(shell date -u '+%Y-%m-%d %H:%M UTC')
test: lint test-unit test-prerequisites ## Lint and every test tier (three lanes side by side)
	@$(MAKE) --no-print-directory -j3 -Otarget test-lane-faults test-lane-others test-lane-third

test-prerequisites: $(STAMP) kafka-jars spark-jars servers-install browser-install

# A lane stops the brokers a tier started once no later tier of the lane uses them: on two
# cores an idle broker and its controller are CPU the other lanes wait for.
kafka_down = KAFKA_PORT=$(1) $(KAFKA) down >/dev/null
# The fault tier's broker of the old transaction protocol: its test port + 20 (tests/faults).
kafka_down_v1 = KAFKA_PORT=$$(( $(1) + 20 )) $(KAFKA) down >/dev/null

test-lane-faults:
	@$(MAKE) --no-print-directory test-faults-core
	@$(call kafka_down_v1,$(TEST_KAFKA_PORT))
	@$(MAKE) --no-print-directory -j1 test-ingest test-observe test-browser

test-lane-others: export DEDUPE_TEST_WEB_PORT_BASE = $(OTHERS_WEB_PORT_BASE)
test-lane-others: export DEDUPE_TEST_SPARK_METRICS_PORT = $(OTHERS_SPARK_METRICS_PORT)
test-lane-others:
	@$(MAKE) --no-print-directory -j1 TEST_KAFKA_PORT=$(OTHERS_KAFKA_PORT) test-integration \
	  test-idempotency test-image
	@$(call kafka_down,$(OTHERS_KAFKA_PORT))
	@$(MAKE) --no-print-directory TEST_KAFKA_PORT=$(OTHERS_KAFKA_PORT) test-cluster
	@KAFKA_CLUSTER_PORT=$(TEST_CLUSTER_PORT) $(PY) -m scripts.kafka_cluster down >/dev/null
	@$(MAKE) --no-print-directory TEST_KAFKA_PORT=$(OTHERS_KAFKA_PORT) test-security

test-lane-third: export DEDUPE_TEST_WEB_PORT_BASE = $(THIRD_WEB_PORT_BASE)
test-lane-third: export DEDUPE_TEST_SPARK_METRICS_PORT = $(THIRD_SPARK_METRICS_PORT)
test-lane-third: export DEDUPE_NETFAULT_KAFKA_PORT = $(NETFAULT_KAFKA_PORT)
test-lane-third: export DEDUPE_NETFAULT_KAFKA_V1_PORT = $(NETFAULT_KAFKA_V1_PORT)
test-lane-third:
	@$(MAKE) --no-print-directory TEST_KAFKA_PORT=$(COMMIT_KAFKA_PORT) test-faults-commit
	@$(call kafka_down_v1,$(COMMIT_KAFKA_PORT))
	@$(MAKE) --no-print-directory -j1 TEST_KAFKA_PORT=$(COMMIT_KAFKA_PORT) test-faults-network \
	  test-spark

bench: $(STAMP) kafka-jars spark-jars ## Contender benchmark, 2M events (BENCH_EVENTS): bench/results.md + .png
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then KAFKA_PORT=$(BENCH_KAFKA_PORT) $(KAFKA) up; fi
	KAFKA_BOOTSTRAP_SERVERS=$${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:$(BENCH_KAFKA_PORT)} \
	  $(PY) -m bench.throughput $(BENCH_ARGS)

bench-cluster: $(STAMP) kafka-jars ## Contender benchmark on a three-broker cluster, replication 3 (bench/results-cluster.md); BENCH_CLUSTER_ARGS
	KAFKA_CLUSTER_PORT=$(BENCH_CLUSTER_PORT) $(PY) -m scripts.kafka_cluster up
	$(PY) -m bench.throughput --replication 3 \
	  --bootstrap $$(KAFKA_CLUSTER_PORT=$(BENCH_CLUSTER_PORT) $(PY) -m scripts.kafka_cluster bootstrap) \
	  --results bench/results-cluster.md --chart bench/results-cluster.png \
	  $${BENCH_CLUSTER_ARGS:---contenders a,b --profiles dup0.6,dup20 --events 500000}

bench-kstreams: $(STAMP) kafka-jars ## Kafka Streams (window store, key-value store) vs the copy and the worker on rounds of 5M events, after the JVM's warm-up (bench/results-kstreams.md); BENCH_KSTREAMS_ARGS
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then KAFKA_PORT=$(BENCH_KAFKA_PORT) $(KAFKA) up; fi
	$(PY) -m bench.throughput \
	  --bootstrap $${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:$(BENCH_KAFKA_PORT)} \
	  --results bench/results-kstreams.md --chart bench/results-kstreams.png \
	  $${BENCH_KSTREAMS_ARGS:---contenders a,b,g,h --profiles dup20 --events 5000000 --runs 3}

bench-lake: $(STAMP) kafka-jars spark-jars ## Rows/s into the lake, append vs merge; files before/after optimize (bench/results-lake.md)
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then KAFKA_PORT=$(BENCH_KAFKA_PORT) $(KAFKA) up; fi
	KAFKA_BOOTSTRAP_SERVERS=$${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:$(BENCH_KAFKA_PORT)} \
	  $(PY) -m bench.lake $(BENCH_LAKE_ARGS)

bench-scale: $(STAMP) ## 50M ids held in 8 partitions, no broker: lookups, RSS, disk/id (bench/results-scale.md)
	$(PY) -m bench.scale $(BENCH_SCALE_ARGS)

bench-recovery: $(STAMP) kafka-jars ## Time to ready from an empty data dir: the bulk restorer vs a bare read of the changelog (bench/results-recovery.md)
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then KAFKA_PORT=$(BENCH_KAFKA_PORT) $(KAFKA) up; fi
	KAFKA_BOOTSTRAP_SERVERS=$${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:$(BENCH_KAFKA_PORT)} \
	  $(PY) -m bench.recovery $(BENCH_RECOVERY_ARGS)

bench-ingest: $(STAMP) kafka-jars ## The ingest service vs a bare produce-only handler: events/s, ack and clean-topic latency (bench/results-ingest.md)
	@if [ -z "$$KAFKA_BOOTSTRAP_SERVERS" ]; then KAFKA_PORT=$(BENCH_KAFKA_PORT) $(KAFKA) up; fi
	KAFKA_BOOTSTRAP_SERVERS=$${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:$(BENCH_KAFKA_PORT)} \
	  $(PY) -m bench.ingest $(BENCH_INGEST_ARGS)

bench-idempotency: $(STAMP) ## Claims/s and p99 per store vs bare INSERT / SET NX / Powertools (bench/results-idempotency.md)
	$(SERVERS) up
	$(PY) -m bench.idempotency $(BENCH_IDEM_ARGS)

clean: ## Remove local data (not the jar cache or .venv)
	rm -rf data lake .pytest_cache .mypy_cache .ruff_cache
