# The two commands: `make demo` and `make test`. Both create .venv and install fleetwatch
# with its extras first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DIR ?= .demo

.PHONY: install demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
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
