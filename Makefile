# The course's two commands are `make lab` and `make test` (see README.md).
# Both set everything up first; the second run of either skips what is done.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SANITIZE := tests/nbval_sanitize.cfg
SOLVED := build/solved
# Per-cell limit: a safety net only; every notebook runs in well under a minute.
NBVAL := $(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	--nbval-cell-timeout=120 --nbval-sanitize-with $(SANITIZE)

# Notebook workers: two on a CPU-only machine; one where a GPU is present, so no two
# notebooks share it (05's benchmark would time 06's steps and see its memory; issue 23).
NB_WORKERS = $(shell $(BIN)/python -c 'import torch; print(1 if torch.cuda.is_available() else 2)' 2>/dev/null || echo 2)

# Each shipped notebook runs once per change, into build/executed/ (course/executed.py):
# the notebooks' test, the prose-number test and the site all read those copies.  They
# run again only when what they show changed: the notebooks, the package and solutions
# they import, the GPU records they show, or the environment.
EXECUTED := build/executed
EXECUTED_RAN := $(EXECUTED)/.ran
NOTEBOOK_INPUTS := $(wildcard notebooks/*.ipynb) \
	$(shell find autograd_lab autograd_lab_solutions -type f \( -name '*.py' -o -name '*.j2' -o -name '*.json' \) 2>/dev/null)
SITE := build/site
SITE_BUILT := $(SITE)/.built

.PHONY: setup lab reset test test-package test-notebooks test-solved test-browser test-matrix site doctor architecture clean

# Package tests go to the two workers file by file (--dist loadfile): the grading and
# assignment modules each grade a whole batch in a module fixture, which per-test
# distribution made both workers build.
# Tests run two pytest workers on two cores: with torch's default of one thread per
# core each, they oversubscribe the CPU and every step gets tens of times slower.
test test-package test-notebooks test-solved test-browser site $(SITE_BUILT) $(EXECUTED_RAN): export OMP_NUM_THREADS = 1

setup: $(STAMP)
	@scripts/ensure-system-packages dot bwrap

# Reinstall only when the dependency files change.  Each step says what it does before
# it starts; pip shows its own progress for the big download (torch, JupyterLab).
$(STAMP): pyproject.toml requirements/course.txt
	@echo "[setup 1/6] Python: $$($(PYTHON) --version 2>&1) ($(PYTHON))"
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the course needs Python 3.11 or newer (its pins: numpy 2.4); set PYTHON=python3.11 (for example) and run make again.")'
	@echo "[setup 2/6] the course's virtual environment: $(VENV)/ (pip upgraded inside it)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "[setup 3/6] the course's packages from requirements/course.txt (torch, JupyterLab, ...):" \
		"the first time this downloads several hundred MB and takes minutes"
	$(BIN)/python -m pip install --progress-bar on -r requirements/course.txt
	@echo "[setup 4/6] autograd-lab itself, editable: your changes to autograd_lab/ apply at once"
	@$(BIN)/python -m pip install --quiet --no-deps -e .
	@echo "[setup 5/6] programs from the operating system: dot (graphviz), bwrap (the grader's sandbox)"
	@scripts/ensure-system-packages dot bwrap
	@echo "[setup 6/6] checking the machine (autograd-lab doctor; make lab runs a quick version later)"
	@$(BIN)/autograd-lab doctor || true
	@touch $(STAMP)
	@echo "[setup] done: the next make lab or make test skips these steps"

# Students work on their own copies in work/ (git ignores it), so the shipped notebooks/
# stay pristine: `git pull` and `make test` keep working whatever a student did.
# `autograd-lab lab` updates work/ (course/workspace.py), then replaces itself with
# JupyterLab on work/, kernels on IPC sockets (docs/contracts.md §2).  The quick doctor
# imports no torch, so the server starts in seconds.
# LAB_ARGS go to JupyterLab: make lab LAB_ARGS="--no-browser --port=8899"
LAB_ARGS ?=
lab: setup
	@$(BIN)/autograd-lab doctor --quick || true
	@$(BIN)/autograd-lab lab --course notebooks --work work $(LAB_ARGS)

# Start a notebook over: make reset NN=01 (or NN=01_dynamic_graph.ipynb); your copy is
# kept in work/backups/.
reset: $(STAMP)
	@test -n "$(NN)" || { echo "usage: make reset NN=01   (a notebook's number or file name)" >&2; exit 2; }
	@$(BIN)/autograd-lab reset $(NN) --course notebooks --work work

test: setup test-notebooks test-package test-solved test-browser

# The prose-number test reads the executed copies instead of running each lab again.
# --durations: every run names its slowest tests, where CI's time limit is won or lost.
test-package: setup $(EXECUTED_RAN)
	AUTOGRAD_LAB_EXECUTED=$(EXECUTED) $(BIN)/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --durations=15 tests --ignore=tests/browser

# Every shipped notebook runs top to bottom with no error and nothing on stderr.
test-notebooks: setup $(EXECUTED_RAN)

$(EXECUTED_RAN): $(STAMP) $(NOTEBOOK_INPUTS)
	@rm -f $@
	$(BIN)/python -m autograd_lab.course.executed notebooks --out $(EXECUTED) --jobs $(NB_WORKERS)
	@touch $@

# Every exercise must be solvable from its own notebook: fill in the reference
# solutions and run the copies in strict mode, where a failed check raises.
test-solved: setup
	rm -rf $(SOLVED)
	$(BIN)/autograd-lab solve notebooks --out $(SOLVED)
	AUTOGRAD_LAB_STRICT=1 $(NBVAL) -n $(NB_WORKERS) --dist loadscope $(SOLVED)

# The same tests on other torch releases, each in a cached venv outside the clone
# (scripts/matrix-venv); writes docs/compatibility.md.  "pinned" means .venv itself.
VERSIONS ?= 2.5.1 2.15.0
test-matrix: setup
	scripts/test-matrix $(VERSIONS)

site: $(SITE_BUILT)

$(SITE_BUILT): $(EXECUTED_RAN)
	@rm -f $@
	$(BIN)/python -m autograd_lab.course.site notebooks --executed $(EXECUTED) --out $(SITE)
	@touch $@

# The course as students see it: JupyterLab in Debian's chromium (driven by playwright,
# no browser download), and every page of the built site, offline.  Screenshots and
# the server's log are kept in build/browser-artifacts/.
test-browser: setup $(SITE_BUILT)
	@scripts/ensure-system-packages chromium
	AUTOGRAD_LAB_BROWSER_REQUIRED=1 $(BIN)/python -m pytest -p no:cacheprovider tests/browser

# docs/architecture.svg from docs/architecture.dot, with the project's own graphviz.
architecture:
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

doctor: setup
	$(BIN)/autograd-lab doctor

clean:
	rm -rf build $(VENV) *.egg-info
