# mysqlprobe: `make demo` and `make test` do all set-up on Debian 12, as root.
VENV    ?= .venv
PYTHON  ?= python3
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed
SOURCES := $(shell find mysqlprobe collectors analysis flamegraphs probes -name '*.py' -o -name '*.c' -o -name '*.h') setup.py pyproject.toml

.PHONY: all deps install demo lint test test-unit test-integration bench clean

all: install

deps:
	bash scripts/setup-host.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python $(SOURCES)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q ".[test]"
	touch $@

install: deps $(STAMP)

# the main job: MariaDB 10.2.11 sandbox, seed load (100003 rows, RANGE 5), profiled
demo: install
	$(BIN)/mysqlprobe lab demo --server 10.2.11 -o out/demo

# pytest exits 5 when it ran no test: that is a failure here, not a pass
define run_pytest
	@$(BIN)/pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test: failing" >&2; exit 1; fi; exit $$rc
endef

# ruff over the tree, mypy over the package (pyproject.toml holds both configurations)
lint: install
	BIN=$(BIN) bash scripts/lint.sh

test: install lint
	$(call run_pytest,-ra tests)

test-unit: install
	$(call run_pytest,-ra tests/unit)

test-integration: install
	$(call run_pytest,-ra tests/integration)

# overhead, accuracy and attach time against bpftrace -> bench/RESULTS.md (about 20 minutes)
bench: install
	$(BIN)/python bench/overhead.py --rows 1000000 --repeats 12

clean:
	rm -rf $(VENV) build *.egg-info out .pytest_cache
