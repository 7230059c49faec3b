# Every target sets itself up from nothing: it creates .venv and installs the package when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test verify soak bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

verify: $(STAMP)
	$(BIN)/nest-cp verify --out reports

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
