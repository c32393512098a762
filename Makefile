# The two commands of the README:
#   make run    set up (if needed) and open the TUI on the offline default pair
#   make test   set up (if needed) and run the whole test suite (what CI runs)
#   make lint   set up (if needed) and type-check the package (CI runs it before the tests)
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: setup run test lint clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml scripts/setup.sh models/offline.toml
	bash scripts/setup.sh

run: setup
	$(VENV)/bin/localspec

test: setup
	$(VENV)/bin/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/python -m mypy localspec

clean:
	rm -rf $(VENV) build dist *.egg-info
