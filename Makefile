# Two commands on a fresh machine: `make demo` and `make test`. Each sets up .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready
NODE ?= demo-node

.PHONY: demo test lint clean fleet

$(READY): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(READY)

# The seed story on an embedded simulated node: zombie vNPUs pending, then destroyed; the
# running and the starting pod's vNPUs kept, with the reason; the pending pod then fits. Then
# the MIG story on a simulated H100: a GI whose record the plugin's GC deleted kept, a leak
# destroyed; and on an H100 with NVIDIA's DRA driver: a prepared claim's GI kept, a leaked one
# destroyed.
demo: $(READY)
	rm -rf $(NODE) $(NODE)-h100 $(NODE)-dra $(NODE)-ppu $(NODE)-dcu $(NODE)-vmhost
	$(BIN)/python -m simulator.namespace -- $(BIN)/python -m simulator.demo $(NODE)

lint: $(READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Whole files per worker: a fleet test module shares one fleet (a module fixture on its worker's
# own block of loopback addresses: tests/fleet/conftest.py).
# (xdist's loadgroup does not group under pytest 9.)
test: $(READY) lint
	$(BIN)/pytest -n 2 --dist loadfile

# N simulated nodes behind their own sshd, on 127.0.0.11...; Ctrl-C tears them down (root).
# As a module from the checkout (python -m puts it on sys.path): the harness imports simulator/.
N ?= 5
fleet: $(READY)
	rm -rf fleet
	$(BIN)/python -m tests.fleet.harness $(N) fleet

clean:
	rm -rf $(VENV) $(NODE) $(NODE)-h100 $(NODE)-dra $(NODE)-ppu $(NODE)-dcu $(NODE)-vmhost fleet try .pytest_cache .ruff_cache

# Issue 7: the model-based lifecycle test at scale (in-process driver), with its counts; issue 5:
# decide() on synthetic nodes, and a converge run's cost over SSH on the fleet (root).
.PHONY: bench
bench: $(READY)
	$(BIN)/python bench/lifecycle.py --histories 10000
	$(BIN)/python bench/decide.py
	$(BIN)/python bench/fleet.py
