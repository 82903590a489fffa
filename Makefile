# The two commands of the README: `make bench` (set up, then run the studies) and `make test`
# (set up, then lint, type-check and run the test suite); `make test-floor` runs the suite at the
# declared floors of the dependencies. Both are idempotent: the virtual environment is rebuilt only
# when pyproject.toml or this Makefile changes, so a second run starts in seconds. Setting up says
# one line; pip's output goes to a log that is printed whole only when the set-up fails.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RESULTS := results

.PHONY: bench bench-full bench-training test test-floor lint typecheck unit clean

# The editable install (hatchling's) puts the checkout on sys.path with a .pth file, not an import
# hook: pytest then finds pytest_ipu when it registers plugins for assertion rewriting, whether the
# suite starts as `python -m pytest` or as the `pytest` script.
# $(call quietly,ENV,COMMANDS): set up the environment ENV by the shell COMMANDS, their output
# (stdout and stderr) in ENV/setup.log; when they fail, print that log whole and fail. A set-up that
# works says nothing more; one that does not shows everything pip said, not only its last line.
quietly = mkdir -p $(1) && { $(2); } > $(1)/setup.log 2>&1 || { cat $(1)/setup.log >&2; \
	echo "make: setting up $(1) failed: the log above is $(1)/setup.log" >&2; exit 1; }

SETUP_LOG := $(VENV)/setup.log

$(STAMP): pyproject.toml Makefile
	@echo "make: setting up $(VENV) (pip install -e '.[dev]'; log in $(SETUP_LOG))"
	@$(call quietly,$(VENV),\
		{ test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } && \
		$(BIN)/python -m pip install --disable-pip-version-check --upgrade pip && \
		$(BIN)/python -m pip install --disable-pip-version-check -e '.[dev]')
	@touch $(STAMP)

# The training studies (TRAINING_STUDIES) run under torchrun, once per process count of NPROC, each
# count's merged JSON in results/training-N.json (each rank's beside it, training-N.rank-R-of-N.json);
# every count after the first is read against the first (--ipu-scaling-baseline: each record's scaling
# efficiency, the terminal's "eff"). Every run, the 1-process one included, has --ipu-torch-threads=1
# and OMP_NUM_THREADS=1: each process trains on one core, so 2 processes on 2 cores compare fairly
# with 1 process on 1. With torch's default (a thread per core in each process) the lone process
# would have both cores and the 2 processes would fight over them, and the efficiency would measure
# that. They train on TRAINING_BACKEND, the CPU, where one core per process is what makes the counts
# comparable, at --training-size=TRAINING_SIZE: small, about a minute for both counts on a 2-core CPU.
# The larger sweep, on a machine with a core per process (ResNet-50 at 224 px and BERT, batches 8, 16
# and 32 per process, timed by the run's settings):
#   make bench-training NPROC="1 2 4" TRAINING_SIZE=full
# TRAINING_ARGS passes more pytest arguments to every training run (BENCH_ARGS goes to the others).
# torchrun --standalone makes its rendezvous on a free port, so two launches on one machine do not
# collide. Rank 0 writes to the terminal; the other ranks' output goes to results/training-N-logs
# (--redirects: a map 0:0,1:3,... from local rank to the streams redirected, 3 = both).
TRAINING_STUDIES := benchmarks/test_training_step.py benchmarks/test_time_to_train.py
NPROC ?= 1 2
TRAINING_SIZE ?= small
TRAINING_BACKEND ?= torch:cpu

# $(training_runs): the training studies once per count of NPROC; rc becomes 1 when one failed.
training_runs = base=; for n in $(NPROC); do \
		quiet=0:0; i=1; while [ $$i -lt $$n ]; do quiet=$$quiet,$$i:3; i=$$((i + 1)); done; \
		OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc-per-node=$$n \
			--log-dir=$(RESULTS)/training-$$n-logs --redirects=$$quiet \
			-m pytest $(TRAINING_STUDIES) -p no:cacheprovider \
			--ipu-backend=$(TRAINING_BACKEND) --ipu-torch-threads=1 --training-size=$(TRAINING_SIZE) \
			--benchmark-json=$(RESULTS)/training-$$n.json --benchmark-columns=median,iqr,rounds \
			$${base:+--ipu-scaling-baseline=$$base} $(TRAINING_ARGS) || rc=1; \
		if [ -z "$$base" ] && [ -f $(RESULTS)/training-$$n.json ]; then base=$(RESULTS)/training-$$n.json; fi; \
	done

# $(report): one report of every run this make wrote (and of results/latest.json, the last make
# bench's, under make bench-training), then exit with rc, or 1 when the report failed.
report = runs=; for f in $(RESULTS)/latest.json $(NPROC:%=$(RESULTS)/training-%.json); do \
		[ ! -f $$f ] || runs="$$runs $$f"; \
	done; \
	if [ -n "$$runs" ]; then \
		$(BIN)/pytest-ipu report $$runs --output $(RESULTS)/report --references benchmarks/references.toml || { [ $$rc -ne 0 ] || rc=1; }; \
	fi; exit $$rc

# The report is written even when a benchmark failed, from whatever the runs measured. The previous
# run's files go first: a figure of a group this run no longer plots must not linger beside the page.
# The training studies are left out of the first pytest run: they run under torchrun after it.
bench: $(STAMP)
	@mkdir -p $(RESULTS) && rm -rf $(RESULTS)/latest.json $(RESULTS)/self-checks.txt $(RESULTS)/training-* $(RESULTS)/report
	@$(BIN)/python -m pytest benchmarks $(TRAINING_STUDIES:%=--ignore=%) -p no:cacheprovider \
		--benchmark-json=$(RESULTS)/latest.json --benchmark-autosave \
		--benchmark-quiet --self-check-details=$(RESULTS)/self-checks.txt \
		$(BENCH_ARGS); rc=$$?; \
	if [ -f $(RESULTS)/latest.json ]; then \
		echo "JSON written to $(RESULTS)/latest.json (history in .benchmarks/)"; \
	fi; \
	$(training_runs); \
	$(report)

# The long sweeps: the LoadGen study at full size (224 px, 10 s runs, MLPerf's Server bound), the
# gate-accuracy study for rates worth quoting (600 s), the training studies at full size: far longer
# than make bench (not timed on a 2-core machine); make bench is the main job.
bench-full:
	$(MAKE) bench BENCH_ARGS="--loadgen-size=full --gate-accuracy-budget=600 --gate-recipe-budget=1800 $(BENCH_ARGS)" TRAINING_SIZE=full

bench-training: $(STAMP)
	@mkdir -p $(RESULTS) && rm -rf $(RESULTS)/training-* $(RESULTS)/report
	@rc=0; $(training_runs); $(report)

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest exits 5 when it collected nothing: a broken suite, so say so rather than pass quietly. Two
# workers (pytest-xdist), one per core of a CI machine; TEST_ARGS="-n 0" runs it in one process.
# Two workers, one test file each at a time (--dist=loadfile): a file's module-scoped runs and
# exports are then made once, not once per worker (loadgroup would do it by mark, but pytest-xdist's
# group suffix does not reach pytest 9's node ids). Not in pyproject's addopts: pytest-benchmark
# stops timing whenever --dist is set, so the benchmarks (make bench, a user's pytest) would measure
# nothing.
XDIST := -n 2 --dist=loadfile

unit: $(STAMP)
	@$(BIN)/python -m pytest $(XDIST) $(TEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# `make test-floor`: the suite again at the declared floors of the dependencies, on each Python where
# a set of floors applies (tests/floor_pins.py reads them from pyproject.toml, environment markers and
# all). First Python 3.8 as the Poplar SDK 3.4 runs it: torch 2.0.1 (PopTorch asserts it), numpy
# 1.22.3 and protobuf 3.17.3 (PopART's pins), setuptools 75.3 (3.8's last), pytest-benchmark 4.0.0,
# the whole suite, two workers. Then this Python (3.11) at its own floors (numpy, scipy, onnx, onnxscript
# and matplotlib differ from 3.8's), running the tests of what those packages do (FLOOR_TESTS); torch
# there is the dev pin, so that torch's dynamo exporter, the one user of onnxscript, runs at
# onnxscript's floor. pytest-ipu itself is installed with its extras against the pins, as a user's
# pip would install it. A set-up from nothing downloads torch 2.0.1's CUDA build for Python 3.8
# (about 4.4 GB; pip's cache keeps it).
#
# PYTHON38 points at a CPython 3.8; by default pyenv's 3.8, else python3.8 on the PATH.
PYTHON38 ?=
FLOOR38_VENV := .venv-py38
FLOOR38_STAMP := $(FLOOR38_VENV)/.installed-stamp
FLOOR_VENV := .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.installed-stamp
FLOOR_EXTRAS := .[torch,onnx,nvidia,report,loadgen]
FLOOR_TESTS := tests/unit/test_onnx_export.py tests/unit/test_onnxruntime_backend.py \
	tests/plugin/test_onnx_plugin.py tests/unit/test_plots.py tests/unit/test_html_report.py \
	tests/unit/test_scaling_report.py tests/unit/test_loadgen_report.py tests/unit/test_measure.py \
	tests/unit/test_bench_seam.py tests/plugin/test_bench_seam_json.py tests/plugin/test_json_output.py \
	tests/unit/test_stats.py tests/unit/test_stats_significance.py tests/unit/test_decide_advice.py

# $(call floor_env,VENV,PYTHON): make VENV with PYTHON at that Python's floors.
floor_env = $(call quietly,$(1),\
		{ test -x $(1)/bin/python || $(2) -m venv $(1); } && \
		$(PYTHON) tests/floor_pins.py pyproject.toml "$$($(2) -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
			> $(1)/floors.txt && \
		$(1)/bin/python -m pip install --disable-pip-version-check -c $(1)/floors.txt -r $(1)/floors.txt \
			-e '$(FLOOR_EXTRAS)')

$(FLOOR38_STAMP): pyproject.toml tests/floor_pins.py Makefile
	@py="$(PYTHON38)"; \
	if [ -z "$$py" ]; then prefix=$$(pyenv prefix 3.8 2>/dev/null) && py="$$prefix/bin/python"; fi; \
	if [ -z "$$py" ] || ! "$$py" -c 'import sys; assert sys.version_info[:2] == (3, 8)' 2>/dev/null; then \
		py=python3.8; fi; \
	if ! "$$py" -c 'import sys; assert sys.version_info[:2] == (3, 8)' 2>/dev/null; then \
		echo "make test-floor: no CPython 3.8 found (the Poplar SDK 3.4's Python; tried$${PYTHON38:+ $(PYTHON38),} pyenv's 3.8 and python3.8): install one (pyenv install 3.8) or pass PYTHON38=/path/to/python3.8" >&2; \
		exit 1; fi; \
	echo "make: setting up $(FLOOR38_VENV) on $$py at the Python 3.8 floors (log in $(FLOOR38_VENV)/setup.log)"; \
	$(call floor_env,$(FLOOR38_VENV),"$$py")
	@touch $(FLOOR38_STAMP)

$(FLOOR_STAMP): pyproject.toml tests/floor_pins.py Makefile
	@echo "make: setting up $(FLOOR_VENV) at this Python's floors (log in $(FLOOR_VENV)/setup.log)"
	@$(call floor_env,$(FLOOR_VENV),$(PYTHON))
	@touch $(FLOOR_STAMP)

test-floor: $(FLOOR38_STAMP) $(FLOOR_STAMP)
	@echo "Python 3.8 floors: $$(paste -sd' ' $(FLOOR38_VENV)/floors.txt)"
	@$(FLOOR38_VENV)/bin/python -m pytest $(XDIST) $(TEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-floor: pytest collected no tests" >&2; exit 1; fi; \
	[ $$rc -eq 0 ] || exit $$rc
	@echo "$$($(FLOOR_VENV)/bin/python -V) floors: $$(paste -sd' ' $(FLOOR_VENV)/floors.txt)"
	@$(FLOOR_VENV)/bin/python -m pytest $(XDIST) $(FLOOR_TESTS) $(TEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-floor: pytest collected no tests" >&2; exit 1; fi; exit $$rc

clean:
	rm -rf $(VENV) $(FLOOR_VENV) $(FLOOR38_VENV) $(RESULTS) .benchmarks .mypy_cache .ruff_cache
