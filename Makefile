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

.PHONY: setup lab test test-package test-notebooks test-solved test-browser test-matrix site doctor architecture clean

# Package tests go to the two workers file by file (--dist loadfile): the grading and
# assignment modules each grade a whole batch in a module fixture, which per-test
# distribution made both workers build.
# Tests run two pytest workers on two cores: with torch's default of one thread per
# core each, they oversubscribe the CPU and every step gets tens of times slower.
test test-package test-notebooks test-solved test-browser site: export OMP_NUM_THREADS = 1

setup: $(STAMP)
	@scripts/ensure-system-packages dot bwrap

# Reinstall only when the dependency files change.
$(STAMP): pyproject.toml requirements/course.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "autograd-lab needs Python 3.10 or newer; set PYTHON=python3.11 (for example) and run make again.")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements/course.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# Containers and Colab often run as root, which JupyterLab refuses without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

# Students work on their own copies in work/ (git ignores it), so the shipped notebooks/
# stay pristine: `git pull` and `make test` keep working whatever a student did.
# Kernels talk over local IPC sockets, not TCP, so ipykernel has no cause to warn.
LAB_FLAGS := --KernelManager.transport=ipc $(ALLOW_ROOT)

lab: setup
	$(BIN)/autograd-lab doctor || true
	$(BIN)/autograd-lab workspace --course notebooks --work work
	$(BIN)/jupyter lab --notebook-dir=work $(LAB_FLAGS)

test: setup test-package test-notebooks test-solved test-browser

test-package: setup
	$(BIN)/python -m pytest -p no:cacheprovider -n 2 --dist loadfile tests --ignore=tests/browser

test-notebooks: setup
	$(NBVAL) -n 2 --dist loadscope notebooks

# Every exercise must be solvable from its own notebook: fill in the reference
# solutions and run the copies in strict mode, where a failed check raises.
test-solved: setup
	rm -rf $(SOLVED)
	$(BIN)/autograd-lab solve notebooks --out $(SOLVED)
	AUTOGRAD_LAB_STRICT=1 $(NBVAL) -n 2 --dist loadscope $(SOLVED)

# The same tests on other torch releases, each in a cached venv outside the clone
# (scripts/matrix-venv); writes docs/compatibility.md.  "pinned" means .venv itself.
VERSIONS ?= 2.5.1 2.15.0
test-matrix: setup
	scripts/test-matrix $(VERSIONS)

site: setup
	$(BIN)/python -m autograd_lab.course.site notebooks --out build/site

# The course as students see it: JupyterLab in Debian's chromium (driven by playwright,
# no browser download), and every page of the built site, offline.  Screenshots and
# the server's log are kept in build/browser-artifacts/.
test-browser: setup site
	@scripts/ensure-system-packages chromium
	$(BIN)/python -m pytest -p no:cacheprovider tests/browser

# docs/architecture.svg from docs/architecture.dot, with the project's own graphviz.
architecture:
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

doctor: setup
	$(BIN)/autograd-lab doctor

clean:
	rm -rf build $(VENV) *.egg-info
