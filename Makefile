# The two commands: `make demo` and `make test`. Both create .venv and install fleetwatch
# with its extras first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DIR ?= .demo
# make test's workers (pytest-xdist): four on two cores keep both busy while tests wait on
# processes and timeouts; a module's tests run on one worker, the longest modules first
# (tests/conftest.py). XDIST= runs the suite in one process
XDIST ?= -n 4 --dist loadfile --no-loadscope-reorder
# the console's built CSS and JavaScript (the rule is below): defined before install names
# them, as make expands a rule's prerequisites when it reads the rule
ASSETS_BUILT := web/assets/node_modules/.fleetwatch-built
ASSETS_SOURCES := web/assets/package.json web/assets/package-lock.json \
  web/assets/fleetwatch.css web/assets/console.js web/assets/favicon.svg web/assets.py

.PHONY: install system-packages assets demo test bench bench-latency docs dist clean

# What each long step of `make install` takes (on disk, and in time on 2 cores), said on a
# line before the step: the one place for these figures (README.md quotes them;
# tests/unit/test_docs_figures.py keeps them equal).
TAKES_SYSTEM := up to about 800 MB, a few minutes
TAKES_JAVA := about 260 MB, about a minute
TAKES_VENV := about 1.5 GB, PySpark 490 MB of it; about 3 minutes the first time, pip \
  downloading about 560 MB
TAKES_ASSETS := about 20 MB, under a minute

install: $(VENV)/.installed $(ASSETS_BUILT)

# Debian packages the demo and the tests use: Nagios plugins (the demo agent declares one;
# the parser tests run them), PostgreSQL (a throwaway cluster for the shared-state tests) and
# systemd (its systemd-analyze verifies the generated units; PID 1 need not be systemd),
# systemd-container (systemd-nspawn boots this machine's root to run the units for real:
# tests/integration/test_systemd.py), Prometheus' node_exporter (bench/agent_footprint.py
# measures the agent beside it) and Prometheus itself (a real server scrapes the prometheus
# sink in tests/integration/test_prometheus.py). Skipped when already there, so no root is needed then;
# libcairo2 is loaded by graphite-web (its cairocffi) in the demo and the graph tests.
# Chromium and its driver: the console's tests drive a real headless browser (Selenium).
# faketime (libfaketime): a real agent's clock is stepped under it while it runs
# (tests/integration/test_clock_step.py). Debian's python3: the Ansible deployment's modules
# run by it, as on a real host, and python3-apt for its apt module, which installs the
# agent's package there (tests/integration/test_ansible_systemd.py). Alertmanager: the
# alertmanager channel posts to a real one (tests/integration/test_alertmanager.py); its
# service is disabled after the install (it would listen on all interfaces, :9093 and :9094).
# VictoriaMetrics: the remote_write sink writes to a real one as well as to Prometheus
# (tests/integration/test_remote_write.py); its service is disabled the same way (:8428).
# Net-SNMP (snmpd, its tools, snmptrapd): the devices' poller polls a real snmpd and takes
# real traps (snmptrap) in the tests, the demo and bench/snmp.py; its services are disabled
# the same way. The standard Nagios plugins (check_dig) and dig: the devices' DNS checks;
# dnsmasq-base (a binary, no service): the DNS server those tests ask.
# debhelper and lintian: `make dist` builds the agent's Debian package and lints it
# (tests/integration/test_package.py installs it into the container).
# `make system-packages` installs only these.
SYSTEM_PACKAGES := monitoring-plugins-basic postgresql systemd systemd-container libcairo2 \
  prometheus-node-exporter prometheus chromium chromium-driver faketime python3 \
  prometheus-alertmanager victoria-metrics snmpd snmp snmptrapd monitoring-plugins-standard \
  bind9-dnsutils dnsmasq-base debhelper lintian python3-apt
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  $(SYSTEM_PACKAGES)

# Java for the history side (Spark 4 runs on Java 17 or 21): Debian's 17 when no java is
# found, as Spark looks for it ($$JAVA_HOME/bin/java, else java on the PATH).
JAVA_PACKAGE := openjdk-17-jre-headless
APT_JAVA := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  $(JAVA_PACKAGE)

# The Python of the venv: 3.11 only, as carbon 1.1.10 (the test and all extras: the demo's
# and the tests' carbon-cache) does not build on 3.12+. Checked before anything is built; a
# .venv made by another Python is rebuilt, not reused.
PYTHON_VERSION := 3.11
VERSION_OF := -c 'import sys; print("%d.%d" % sys.version_info[:2])'

# carbon's and graphite-web's setup.py would install under /opt/graphite without this
export GRAPHITE_NO_PREFIX := True

$(VENV)/.installed: setup.cfg pyproject.toml
	@v=$$($(PYTHON) $(VERSION_OF) 2>/dev/null); test "$$v" = $(PYTHON_VERSION) || { \
	  echo "make install: fleetwatch needs Python $(PYTHON_VERSION) ($(PYTHON) is $${v:-not \
	found}): make install PYTHON=python$(PYTHON_VERSION)" >&2; exit 1; }
	@$(MAKE) --no-print-directory system-packages
	@{ test -n "$$JAVA_HOME" && test -x "$$JAVA_HOME/bin/java"; } || command -v java \
	  >/dev/null || { echo "make install: Java for the history side, $(JAVA_PACKAGE) \
	($(TAKES_JAVA))"; $(APT_JAVA) || (apt-get update -q && $(APT_JAVA)); }
	@v=$$($(BIN)/python $(VERSION_OF) 2>/dev/null); if test -e $(VENV) && \
	  test "$$v" != $(PYTHON_VERSION); then echo "make install: $(VENV) was made by Python \
	$${v:-unknown}: rebuilding it with $(PYTHON)"; rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make install: fleetwatch and every extra into $(VENV) ($(TAKES_VENV))"
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[all,test]'
	touch $@

# The console's CSS and JavaScript (web/assets.py): the npm packages pinned by
# web/assets/package-lock.json (npm ci: from the registry, or the npm cache or a mirror on a
# machine without internet, docs/operating/console.md), then the files the pages load copied
# into web/static/ with our own (web/assets/). Neither is committed. Part of install, so of
# demo and test, rebuilt when the lock or our files change; without npm or the registry,
# install goes on and the console serves its pages unstyled and not updating while open (it
# logs so).

$(ASSETS_BUILT): $(ASSETS_SOURCES) | $(VENV)/.installed
	@$(MAKE) --no-print-directory assets || echo "make install: the console's CSS and \
	JavaScript are not built (above: why); it serves its pages without them. Build them with \
	make assets once npm can reach its registry, a mirror or its cache \
	(docs/operating/console.md)" >&2

assets: $(VENV)/.installed
	@command -v npm >/dev/null || { echo "make assets: npm not found: install nodejs and \
	npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	@echo "make assets: the console's CSS and JavaScript, with npm ($(TAKES_ASSETS))"
	cd web/assets && npm ci
	$(BIN)/python -m web.assets
	@touch $(ASSETS_BUILT)

system-packages:
	@dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1 || { echo "make install: the Debian \
	packages of the demo and the tests ($(TAKES_SYSTEM))"; { $(APT_INSTALL) || \
	  (apt-get update -q && $(APT_INSTALL)); } && \
	  { systemctl disable --quiet prometheus-alertmanager victoria-metrics snmpd \
	  snmptrapd.socket snmptrapd 2>/dev/null || true; }; }

demo: install
	$(BIN)/fleetwatch demo --dir $(DEMO_DIR)

# the 20 slowest steps printed at the end, just above the summary (what CI's log keeps):
# where the suite's time went that run (docs/development/testing.md)
DURATIONS ?= --durations=20

test: install
	$(BIN)/python -m pytest $(XDIST) $(DURATIONS) $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/run_all.py

# the latency benchmarks, run before each stop so that a regression is seen the day it is
# made (docs/development/benchmarks.md); about 5 minutes
bench-latency: install
	$(BIN)/python bench/run_all.py --latency

# docs/reference/ from the code (settings' help, the command registry); tests/unit/
# test_docs_reference.py fails while the committed files differ from what this writes
docs: install
	$(BIN)/python docs/generate.py

# dist/: the sdist and the wheel (reproducible: the same tree gives the same bytes) and the
# agent's Debian package, fleetwatch-agent_VERSION_ARCH.deb, linted (packaging/dist.py;
# docs/operating/packages.md). WHEELHOUSE=DIR: the agent's dependencies as wheels, no
# index asked; DEB_VERSION: the package's version (default fleetwatch's)
WHEELHOUSE ?=
DEB_VERSION ?=
dist: $(VENV)/.installed
	@$(MAKE) --no-print-directory system-packages
	$(BIN)/python packaging/dist.py --out dist $(if $(WHEELHOUSE),--wheelhouse \
	  $(WHEELHOUSE)) $(if $(DEB_VERSION),--deb-version $(DEB_VERSION))
	lintian --fail-on error $$(ls -t dist/fleetwatch-agent_*.deb | head -1)

clean:
	rm -rf $(VENV) $(DEMO_DIR) build dist *.egg-info web/static web/assets/node_modules
