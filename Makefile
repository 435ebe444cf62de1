# The two commands: `make demo` and `make test`. Both create .venv and install fleetwatch
# with its extras first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DIR ?= .demo

.PHONY: install demo test bench clean

install: $(VENV)/.installed

# Debian packages the demo and the tests use: Nagios plugins (the demo agent declares one;
# the parser tests run them), PostgreSQL (a throwaway cluster for the shared-state tests) and
# systemd (its systemd-analyze verifies the generated units; PID 1 need not be systemd).
# Skipped when already there, so no root is needed then.
SYSTEM_PACKAGES := monitoring-plugins-basic postgresql systemd
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  $(SYSTEM_PACKAGES)

# carbon's setup.py would install under /opt/graphite without this
export GRAPHITE_NO_PREFIX := True

$(VENV)/.installed: setup.cfg pyproject.toml
	@dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1 || $(APT_INSTALL) || \
	  (apt-get update -q && $(APT_INSTALL))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[all,test]'
	touch $@

demo: install
	$(BIN)/fleetwatch demo --dir $(DEMO_DIR)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) build *.egg-info
