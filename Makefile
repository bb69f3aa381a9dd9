# mysqlprobe: `make demo` and `make test` do all set-up on Debian 12, as root.
#   make install   the product only: what a database host needs to profile its server
#   make wheel     dist/mysqlprobe-*.whl, its BPF objects built here: pip installs it on a host with no compiler
#   make demo      install, then the lab: MariaDB 10.2.11 in a sandbox, the seed load, profiled
#   make test      the tools the tests check against too, then lint and every test tier
VENV    ?= .venv
PYTHON  ?= python3
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed
TEST_STAMP = $(VENV)/.test-installed
SOURCES := $(shell find mysqlprobe collectors analysis flamegraphs probes -name '*.py' -o -name '*.c' -o -name '*.h') setup.py pyproject.toml

.PHONY: all install wheel demo lint test test-unit test-integration bench fuzz clean

all: install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python $(SOURCES)
	bash scripts/setup-host.sh run
	$(BIN)/python -m pip install -q --upgrade pip
	rm -rf build  # setuptools keeps modules of earlier builds there, and would install them again
	$(BIN)/python -m pip install -q .
	touch $@

$(TEST_STAMP): $(STAMP)
	bash scripts/setup-host.sh test
	$(BIN)/python -m pip install -q ".[test]"
	touch $@

install: $(STAMP)

wheel: $(STAMP)
	rm -rf build dist
	$(BIN)/python -m pip wheel -q --no-deps -w dist .

# the main job: MariaDB 10.2.11 sandbox, the seed load (about 10 s), profiled in the default mode
demo: $(STAMP)
	bash scripts/setup-host.sh demo
	$(BIN)/mysqlprobe lab demo --server 10.2.11 -o out/demo

# pytest exits 5 when it ran no test: that is a failure here, not a pass
define run_pytest
	@$(BIN)/pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test: failing" >&2; exit 1; fi; exit $$rc
endef

# ruff over the tree, mypy over the package (pyproject.toml holds both configurations)
lint: $(TEST_STAMP)
	BIN=$(BIN) bash scripts/lint.sh

test: $(TEST_STAMP) lint
	$(call run_pytest,-ra tests)

test-unit: $(TEST_STAMP)
	$(call run_pytest,-ra tests/unit)

test-integration: $(TEST_STAMP)
	$(call run_pytest,-ra tests/integration)

# the capture readers' coverage-guided fuzzing campaign (atheris), 10 minutes -> bench/RESULTS.md section 21
fuzz: $(TEST_STAMP)
	$(BIN)/python -m pip install -q "atheris>=2.3"
	$(BIN)/python bench/fuzz.py --seconds 600

# overhead, accuracy and attach time against bpftrace -> bench/RESULTS.md (about 20 minutes)
bench: $(TEST_STAMP)
	$(BIN)/python bench/overhead.py --rows 1000000 --repeats 12

clean:
	rm -rf $(VENV) build dist *.egg-info out .pytest_cache .mypy_cache .ruff_cache
