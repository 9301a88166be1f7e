# gdp-audit developer entry points. Everything installs into .venv from scratch.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv check demo test test-fast test-quick bench clean browser

# The `opacus` extra (CPU torch 2.13.0 from the machine's local wheels + Opacus 1.6.0) is for the tests marked `torch`
# (gdp-audit as Opacus's accountant): measured +104 s of install and +861 MB of venv (torch alone 754 MB) at load ~12.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required, found " + sys.version'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,mlflow,check,hf,opacus,s3]'
	touch $(STAMP)

venv: $(STAMP)

# The main job on embedded defaults (ephemeral Prefect, local lake and DuckDB report): the privacy report of
# De et al.'s CIFAR-10 WRN-40-4 run, a DP-SGD regret-map sweep published to data/reports/ with a sample query, and
# the privacy audit of the sample model registry (data/registry/), whose synthetic canary-mlp v2 evidence is flagged
# as a violation (scores simulated from a run with 4x the declared sampling rate: data/registry/evidence/simulate.py).
demo: $(STAMP)
	$(VENV)/bin/gdp analyze subsampled_gaussian --noise-multiplier 9.4 --sampling-rate 0.32768 --steps 2000
	$(VENV)/bin/gdp demo
	$(VENV)/bin/gdp audit
	$(VENV)/bin/gdp sql "SELECT version, mu, gdp_regret, claimed_epsilon, claim_reproduced_epsilon AS rdp_epsilon, \
	  epsilon AS pld_epsilon_upper, claim_certified FROM model_privacy WHERE model = 'cifar10-wrn40-4' ORDER BY version"
	$(VENV)/bin/gdp sql "SELECT model, version, verdict, round(mu_lower, 3) AS mu_lower_bound, round(certified_mu, 3) \
	  AS certified_mu, confidence, family_level, round(detectable_mu, 3) AS detectable_mu, synthetic FROM evidence"

# Lint, format and types: ruff over the whole tree, mypy over gdpcore, tasks and flows (pyproject.toml [tool.mypy],
# with the pydantic plugin).
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Tests, by markers (pyproject.toml; `prefect` and `subprocess` are added by tests/conftest.py from fixtures):
#   test        every test, slow ones included, with CI's Hypothesis example counts (what .ci/run runs; ~15 min)
#   test-fast   every test not marked `slow`: still starts the Prefect harness and `gdp` / server subprocesses
#   test-quick  the inner loop: gdpcore and the task tests that need no Prefect server and spawn no process (not
#               slow, not prefect, not subprocess), Hypothesis `dev` profile; prints the 15 slowest tests. Measured
#               on the 2-core machine: ~990 tests, 1 min 24 s wall, 79 s CPU (load 1.5-3.4 from other jobs)
test: $(STAMP) browser
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest --durations=25

# The report-site test (tests/pipeline/test_site.py) drives Debian's headless Chromium. Installed here when it is
# missing and apt-get can install it (root, as CI runs); a failing install stops `make test`. Without it the test
# skips with its reason, and fails under CI=true.
browser:
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium (Debian package) for tests/pipeline/test_site.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" --durations=15

test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not prefect and not subprocess" --durations=15

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,mlflow,check,hf,bench]'
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
