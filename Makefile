# genworker — every target sets itself up: a fresh clone needs only python3 (>= 3.11).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench check clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)  ## serve the demo workspace on 127.0.0.1:8000
	exec $(PY) start.py

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

check: $(STAMP)  ## validate the workspace
	$(VENV)/bin/genworker check

bench: $(STAMP)  ## every benchmark, each against a bare baseline in the same run (docs/benchmarks.md)
	$(PY) bench/run.py
	$(PY) bench/restart.py
	$(PY) bench/engine.py
	$(PY) bench/planning.py
	$(PY) bench/supervision.py
	$(PY) bench/conflicts.py
	$(PY) bench/chat_http.py
	$(PY) bench/scaling.py
	$(PY) bench/cluster.py
	$(PY) bench/inbox.py
	$(PY) bench/heartbeat.py
	$(PY) bench/webhook.py
	$(PY) bench/channels_ingest.py
	$(PY) bench/waiting.py
	$(PY) bench/memory.py
	$(PY) bench/spaces.py
	$(PY) bench/startup.py
	$(PY) bench/idle_rss.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build src/*.egg-info
