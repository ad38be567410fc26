# The README's two commands: `make demo` and `make test`. Both set up first.
VENV ?= .venv
DTNET = $(VENV)/bin/dtnet
PY = $(VENV)/bin/python
DEMO ?= experiments/demo.yaml

.PHONY: setup demo test unit integration clean bench

setup:
	bash scripts/bootstrap.sh

demo: setup
	$(DTNET) run $(DEMO)

# Unit and integration tiers in one run; exit 5 ("no tests ran") fails too.
test: setup
	$(PY) -m pytest tests examples -v -p no:cacheprovider

unit: setup
	$(PY) -m pytest tests/unit examples -q -p no:cacheprovider

integration: setup
	$(PY) -m pytest tests/integration -v -m mininet -p no:cacheprovider

clean:
	$(DTNET) clean
