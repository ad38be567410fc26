# The README's two commands: `make demo` and `make test`. Both set up first.
VENV ?= .venv
DTNET = $(VENV)/bin/dtnet
PY = $(VENV)/bin/python
DEMO ?= experiments/demo.yaml

.PHONY: setup demo test unit integration clean bench lab-box lab-check

setup:
	bash scripts/bootstrap.sh

demo: setup
	$(DTNET) run $(DEMO)

# Unit and integration tiers in one run; exit 5 ("no tests ran") fails too.
test: setup
	$(PY) -m pytest tests -v -p no:cacheprovider

unit: setup
	$(PY) -m pytest tests/unit -q -p no:cacheprovider

integration: setup
	$(PY) -m pytest tests/integration -v -m mininet -p no:cacheprovider

clean:
	$(DTNET) clean

# The lab VM (docs/lab-vm.md): not part of `make test`; needs root, ~1 GB of
# downloads once and, under software emulation, tens of minutes.
lab-box:
	bash scripts/lab-box.sh

lab-check:
	bash scripts/lab-check.sh $(LAB_CHECK_ARGS)
