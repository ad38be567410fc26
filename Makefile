# The README's two commands: `make demo` and `make test`. Both set up first.
VENV ?= .venv
DTNET = $(VENV)/bin/dtnet
PY = $(VENV)/bin/python
DEMO ?= experiments/demo.yaml

.PHONY: setup torch packet packet-optimized demo test unit integration clean bench lab-box lab-check

setup:
	bash scripts/bootstrap.sh

# PyTorch 2.13.0 (CPU), for real programs on the hosts; see docs/real-programs.md.
torch:
	DTNET_TORCH=1 bash scripts/bootstrap.sh

# ns-3 3.37 (Debian's libns3-dev) and the packet engine's driver; see docs/packet-engine.md.
packet:
	DTNET_NS3=1 bash scripts/bootstrap.sh

# The same, with ns-3 rebuilt from Debian's source (optimized profile): faster runs, same results.
packet-optimized:
	DTNET_NS3=optimized bash scripts/bootstrap.sh

demo: setup
	$(DTNET) run $(DEMO)

# Unit and integration tiers in one run; exit 5 ("no tests ran") fails too.
# torch: the real-program tests run a gloo job; packet: the packet engine's tests run ns-3.
test: torch packet
	$(PY) -m pytest tests examples -v -p no:cacheprovider

unit: setup
	$(PY) -m pytest tests/unit examples -q -p no:cacheprovider

integration: torch
	$(PY) -m pytest tests/integration -v -m mininet -p no:cacheprovider

clean:
	$(DTNET) clean

# The lab VM (docs/lab-vm.md): not part of `make test`; needs root, ~1 GB of
# downloads once and, under software emulation, tens of minutes.
lab-box:
	bash scripts/lab-box.sh

lab-check:
	bash scripts/lab-check.sh $(LAB_CHECK_ARGS)
