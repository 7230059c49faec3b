# Every target sets itself up from nothing: it creates .venv and installs the package when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-slow verify soak bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

# The fast tier, on every core (pytest-xdist): a few minutes on two cores. tests/tiers.py says
# what waits for the slow tier: further seeds of the long cross-checks, the 200-seed soak sample.
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist worksteal -m "not slow"

# The slow tier, which CI runs after the fast one (.ci/run)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist worksteal -m slow

verify: $(STAMP)
	$(BIN)/nest-cp verify --out reports --work-limit 20

# >= 10,000 seeded random tiny instances, every backend cross-checked (about half an hour of
# solving); resumable: run it again after an interruption and it continues
soak: $(STAMP)
	$(BIN)/nest-cp soak --count 10000 --out reports/soak.md

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

lint: $(STAMP)
	$(BIN)/ruff check nest_cp dp verify tests benchmarks scripts

clean:
	rm -rf $(VENV) .nest-cp-cache
