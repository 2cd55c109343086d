# The README's contract: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest docs bench codegen compat faults system-deps peers clean src-tree

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml codec/_speedups.c codec/_keyhash.h sdk/_hot_append.c | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests use, installed when missing and we are root: kcat
# (interop), a Java runtime for the local Spark of the data source's tests,
# zookeeper (a private server per test worker for brokerlite's cluster mode), Go
# with the sources of sarama 1.22 and kafka-go 0.2.1 (old-protocol clients of
# issue #37, built by their tests in GOPATH mode) and chromium with
# chromium-driver (the console's tests in a real browser), and a JDK with Maven
# (Apache Kafka's jars, fetched by `make peers`; javac for the Java harnesses),
# and fuse3 (libfuse 3 and fusermount3: the fault tests' disk that can stall).
system-deps:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null) \
	      || echo "warning: could not install kcat; its tests will be skipped"; \
	  else echo "warning: kcat missing and not root; its tests will be skipped"; fi; }
	@command -v java >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null) \
	      || echo "warning: could not install Java; the Spark tests will fail"; \
	  else echo "warning: java missing and not root; the Spark tests will fail"; fi; }
	@[ -f /usr/share/java/zookeeper.jar ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null) \
	      || echo "warning: could not install zookeeper; the cluster tests will be skipped"; \
	  else echo "warning: zookeeper missing and not root; the cluster tests will be skipped"; fi; }
	@{ command -v go >/dev/null 2>&1 && [ -d /usr/share/gocode/src/github.com/Shopify/sarama ] && [ -d /usr/share/gocode/src/github.com/segmentio/kafka-go ]; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-github-shopify-sarama-dev golang-github-segmentio-kafka-go-dev >/dev/null) \
	      || echo "warning: could not install Go, sarama and kafka-go; their tests will be skipped"; \
	  else echo "warning: Go or its clients missing and not root; their tests will be skipped"; fi; }
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "warning: could not install chromium; the console's browser tests will be skipped"; \
	  else echo "warning: chromium or chromedriver missing and not root; the console's browser tests will be skipped"; fi; }

	@command -v fusermount3 >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null) \
	      || echo "warning: could not install fuse3; the slow-disk fault tests will be skipped"; \
	  else echo "warning: fuse3 missing and not root; the slow-disk fault tests will be skipped"; fi; }
	@{ command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jdk-headless maven >/dev/null) \
	      || echo "warning: could not install a JDK and Maven; the tests against Apache Kafka will fail"; \
	  else echo "warning: javac or mvn missing and not root; the tests against Apache Kafka will fail (TRAFKA_SKIP_KAFKA=1 skips them)"; fi; }

# Apache Kafka (3.9 and 4.x) and Spark's Kafka connector from Maven Central, into
# .cache/peers/ (ignored), once: the peers of the tests and benchmarks that run
# against the real broker (tests/kafka_peers.py), and the class-data archives
# that halve their JVMs' start-up (Kafka's, and Spark's: tests/spark_home.py).
# TRAFKA_SKIP_KAFKA=1 skips them.
# And the Go clients of tests/interop/gopeers (franz-go, IBM/sarama, kafka-go)
# from the Go module proxy into Go's module cache, as go.sum pins them, and
# built once to fill Go's build cache: a first build took 2 min of CPU (6.5 min
# on a busy 2-core machine), more than a test's deadline; the go_peers fixture
# then links in seconds. And franz-go's own pkg/kgo tests (its module at the
# version tests/interop/kgo_suite.py names), compiled into .cache/kgo/ (ignored).
# And segmentio/kafka-go's own tests (tests/interop/kafkago_suite.py), compiled
# into .cache/kafkago/ (ignored).
peers: $(STAMP) system-deps
	$(PY) tests/kafka_peers.py fetch
	@if command -v go >/dev/null 2>&1; then cd tests/interop/gopeers && go mod download && go build -o /dev/null .; \
	  else echo "warning: Go missing; the tests of franz-go, sarama and kafka-go will be skipped"; fi
	@if command -v go >/dev/null 2>&1; then $(PY) tests/interop/kgo_suite.py && $(PY) tests/interop/kafkago_suite.py; fi

demo: $(STAMP)
	$(PY) -m trafka.tools.demo

# lint-imports checks the layers (pyproject's [tool.importlinter]); like mypy it
# reads the packages through the src-tree below.
lint: src-tree
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=$(MYPY_SRC) $(VENV)/bin/lint-imports --no-cache

# mypy, import-linter and mkdocstrings cannot follow setuptools' editable finder
# (folder -> trafka.<folder>), so they read the packages through a symlink tree
# laid out as installed, one link per folder (a new module needs nothing). Kept
# after trying the alternatives (issue #47; docs/design.md, "Why make src-tree"):
# mypy_path=. with explicit_package_bases names the modules sdk.*, not
# trafka.sdk.*, and leaves every trafka.* import unresolved; setuptools'
# editable_mode=strict links file by file (a new module needs a reinstall) and
# mypy then wants a py.typed; griffe reads the finder's mapping but looks for a
# `trafka` folder in each folder's parent. Only moving the folders under
# src/trafka/ would end it, and the README's layout stays.
MYPY_SRC := $(VENV)/mypy-src
src-tree: $(STAMP)
	@mkdir -p $(MYPY_SRC)/trafka
	@for d in codec common sdk brokerlite proxy discovery spark tools console compat; do ln -sfn ../../../$$d $(MYPY_SRC)/trafka/$$d; done

typecheck: src-tree
	MYPYPATH=$(MYPY_SRC) $(VENV)/bin/mypy --explicit-package-bases -p trafka.codec -p trafka.common -p trafka.sdk -p trafka.brokerlite -p trafka.proxy -p trafka.discovery -p trafka.spark -p trafka.tools -p trafka.console -p trafka.compat

# The suite runs in pytest-xdist workers, a file's tests together in one:
# four on two cores, since the suite waits more than it computes (brokers,
# timeouts, parked requests) and more workers fill the idle CPU. Measured
# (issue #60, s78) on one head within the hour, quiet machine: `-n 2` 1,720 s
# (vmstat: 23% idle), `-n 3` 1,456 s (10% idle), every test passing at -n 3
# (and in a second -n 3 run under other jobs' load 8-18). Earlier `pytest -n 2`
# / `-n 4 --dist loadfile` over tests/sdk, quiet machine: 323 s (CPUs 51% busy)
# / 241 s (75%); but `.ci/run` at -n 4 (s76, 7513686) took 2,108 s of pytest
# against 2,114 at -n 2 (s74), each test taking twice as long, and two tests
# lost a race under the load of four workers. Since CONFINED's work (Spark, the
# three-node Kafka clusters) goes to one worker only (s92, tests/conftest.py's
# CONFINED_WORKERS), `-n 4` is the faster again: on one head within the hour,
# quiet machine, `-n 3` (two workers taking that work) 1,423 s, `-n 4` (one)
# 1,272 s, every test passing at -n 4 (11,669).
# TRAFKA_TIMING_OUT=FILE records each test's CPU, its
# processes' included; `python tests/suite_timing.py FILE` ranks files by it.
# With more workers than that, tests/conftest.py keeps Spark and the three-node
# Kafka clusters on the first (without that, tests/spark and tests/faults at
# -n 4 gave 37 errors: Spark sessions started past a test's timeout, Spark's own
# 10 s waits for its Python workers); a test that starts a session JVM gets 300 s
# more timeout. `make pytest PYTEST_WORKERS=0` runs it in this process alone.
# Files go to the workers in the order tests/conftest.py sets (those with a test
# marked slow first), not xdist's (most tests first).
PYTEST_WORKERS ?= 4
pytest: $(STAMP) system-deps peers
	$(PY) -m pytest -q --durations=25 $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# --strict fails on a warning, griffe's about a docstring it cannot read
# included (-q would hide those from --strict). The API reference must show no
# raw Sphinx role (docs/_ext/griffe_roles.py turns them into links; a role it
# misses would show as text).
docs: src-tree
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site > $(VENV)/mkdocs.log 2>&1 \
	  || { grep -v '^INFO' $(VENV)/mkdocs.log; exit 1; }
	$(PY) -c "import re, sys; found = re.findall(r':(?:class|meth|func|mod|attr|exc|data|obj):', open('site/reference/index.html').read()); sys.exit(f'raw Sphinx roles in site/reference: {len(found)}' if found else 0)"

test: lint typecheck docs pytest

# The benchmarks: measurements (figures and ratios), not tests. Every script
# here takes --smoke (tiny sizes, whatever its other options say), and
# tests/bench/test_bench_smoke.py runs each line of this target with it (except
# a line whose smoke run would only repeat another line's: COVERED there), so a
# benchmark that breaks fails the suite instead of waiting for the next run.
bench: $(STAMP) peers
	$(PY) bench/codec.py
	$(PY) bench/schemas.py
	$(PY) bench/imports.py
	$(PY) bench/broker.py
	$(PY) bench/cluster.py
	$(PY) bench/clients.py
	$(PY) bench/clients.py --records 300000 --partitions 12 --keys 1000 --clients trafka,confluent-kafka
	$(PY) bench/clients.py --suite eos --records 300000
	$(PY) bench/clients.py --suite share --records 300000 --clients trafka,confluent-kafka
	$(PY) bench/clients.py --broker brokerlite,kafka --clients trafka,confluent-kafka,java
	$(PY) bench/clients.py --suite producer --workloads a,b,c,d,e --broker brokerlite,kafka
	$(PY) bench/clients.py --broker brokerlite,kafka --cluster 3 --records 1000000 --clients trafka,confluent-kafka,java --rate 200
	$(PY) bench/proxy.py --records 3000000 --cluster 1,3 --rate 500,2000 --rounds 3 --paths "direct,route none,murmur2,murmur2 journal,murmur2 topic,none encrypted,murmur2 encrypted"
	$(PY) bench/proxy.py --upstream kafka --records 1000000 --cluster 3 --replication 3 --rate 2000 --idle 0
	$(PY) bench/spark.py
	$(PY) bench/spark_kafka.py
	$(PY) bench/spark_plan.py

# The generated files: the codec's messages from Kafka's specs, and the SDK's
# configuration reference (docs/configuration.md) from the config definitions.
# Tests fail when either is stale.
codegen: $(STAMP)
	$(PY) -m trafka.tools.codegen
	$(PY) -m trafka.tools.config_reference

# docs/compatibility.md's feature table, written from the outcomes of the tests
# marked compat (tests/compat_page.py); a test run fails when the page is stale.
compat: $(STAMP) system-deps peers
	TRAFKA_WRITE_COMPAT=1 $(PY) -m pytest -q -m compat -n $(PYTEST_WORKERS) --dist loadfile

# The long fault run (issue #64): every schedule of tests/faults/schedules.py on a
# brokerlite cluster in network namespaces (root only), the checker's table per
# schedule. FAULTS_ARGS passes options: --schedules a,b --workloads acks,txn,proxy,
# proxy-journal --broker brokerlite|kafka|both --seed N --cycles N.
faults: $(STAMP) system-deps
	$(PY) tests/faults/run.py $(FAULTS_ARGS)

clean:
	rm -rf $(VENV) site build *.egg-info
