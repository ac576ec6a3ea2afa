# The two commands of a fresh machine: `make demo` and `make test`.
# Both install what they need (Debian packages, a project venv) and are quick
# the second time: every step is skipped when its inputs have not changed.
# Every step that can take minutes says so first ("== ...") and shows its
# progress (apt and pip lines, CMake's [n/N], the suite running).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
JOBS ?= 2
DEV := build/dev
BENCH_VENV := build/bench-venv
ASAN := build/asan
FUZZ := build/fuzz
TSAN := build/tsan
# make fuzz: every libFuzzer harness (fuzz/) for FUZZ_SECONDS each; make test
# runs each for FUZZ_QUICK_SECONDS from its seed corpus.
FUZZ_SECONDS ?= 600
FUZZ_QUICK_SECONDS ?= 4
# clang-14 and its runtimes (libFuzzer, ASan, UBSan) build the fuzz harnesses.
APT_PACKAGES := libgtest-dev libbenchmark-dev openmpi-bin libopenmpi-dev clang-format \
  clang-14 libclang-rt-14-dev zlib1g-dev libturbojpeg0-dev libpng-dev libwebp-dev libdeflate-dev \
  ccache
CMAKE_COMMON := -G Ninja -DPython_EXECUTABLE=$(CURDIR)/$(PY)
# Every CMake build this Makefile configures compiles through ccache: the wheel
# (make test-wheel) compiles the core, the CLI and the module with the dev
# build's compiler and flags, so it takes them from the cache instead of
# compiling them a second time. (Read when a build folder is configured.)
export CMAKE_CXX_COMPILER_LAUNCHER := ccache

# make lint: clang-format and ruff (tools/lint); make test runs it first.
.PHONY: demo test lint build system venv test-cpp test-asan test-tsan test-python test-wheel bench clean \
  fuzz fuzz-build test-fuzz

demo: build
	@echo "== make demo: the tour on the embedded data set -> build/demo/shardkit-demo.html"
	$(DEV)/cli/shardkit demo --out build/demo/shardkit-demo.html
	@echo "== make demo: real text on this machine (the standard library's .py files) -> a BPE tokenizer trained here -> shardkit prepare -> the loader on 4 ranks (build/demo/stdlib; steps done before are skipped)"
	$(PY) tools/demo_corpus.py --cli $(DEV)/cli/shardkit --out build/demo/stdlib

test: lint build test-cpp test-asan test-fuzz test-python test-wheel
	@echo "make test: all suites passed"

lint: venv
	@echo "== make test: lint (clang-format, ruff)"
	tools/lint

system:
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  echo "== installing Debian packages (minutes): $(APT_PACKAGES)"; \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); }

# pip without -q: the first install downloads torch, JAX and more (minutes),
# one line per package; no progress bars in logs.
PIP_INSTALL := -m pip install --progress-bar off
$(VENV)/.stamp: requirements-dev.txt
	@echo "== project venv $(VENV): creating it if needed, then pip install -r requirements-dev.txt (minutes the first time)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) $(PIP_INSTALL) --upgrade pip
	$(PY) $(PIP_INSTALL) -r requirements-dev.txt
	touch $@

venv: system $(VENV)/.stamp

$(DEV)/build.ninja: | venv
	@echo "== configuring the dev build ($(DEV))"
	cmake -S . -B $(DEV) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release \
	  -DSHARDKIT_BUILD_PYTHON=ON -DSHARDKIT_BUILD_BENCHMARKS=ON

build: venv $(DEV)/build.ninja
	@echo "== building $(DEV): the core, CLI, Python module, tests and benchmarks ([n/N] per file)"
	cmake --build $(DEV) -j $(JOBS)

# The ASan+UBSan build: every C++ test, not the CLI, benchmarks or Python module.
# -O1 -g1 (line tables: a report names file and line) compiles in less than half
# the CPU time of RelWithDebInfo's -O2 -g (7.1 s against 16.9 s user for
# sharding/mixture.cc with GCC 12), the optimisation level the ASan documentation
# recommends. Reconfigured when this Makefile changes (its flags live here).
ASAN_FLAGS := -O1 -g1 -DNDEBUG
$(ASAN)/build.ninja: Makefile | venv
	@echo "== configuring the ASan+UBSan build ($(ASAN), $(ASAN_FLAGS))"
	cmake -S . -B $(ASAN) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(ASAN_FLAGS)" \
	  -DSHARDKIT_SANITIZE=ON -DSHARDKIT_BUILD_CLI=OFF
	touch $@

test-cpp: build
	@echo "== make test: C++ tests (ctest, $(DEV))"
	ctest --test-dir $(DEV) --output-on-failure -j $(JOBS)

test-asan: venv $(ASAN)/build.ninja
	@echo "== make test: building $(ASAN), then its C++ tests under ASan+UBSan"
	cmake --build $(ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN) --output-on-failure -j $(JOBS)

$(FUZZ)/build.ninja: | system
	@echo "== configuring the fuzz build ($(FUZZ), clang-14)"
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSHARDKIT_SANITIZE=ON -DSHARDKIT_BUILD_FUZZERS=ON -DSHARDKIT_BUILD_TESTS=OFF \
	  -DSHARDKIT_BUILD_MPI=OFF

fuzz-build: $(FUZZ)/build.ninja
	@echo "== building the fuzz harnesses ($(FUZZ))"
	cmake --build $(FUZZ) -j $(JOBS)

# Findings (crash, sanitizer report, leak, timeout, out of memory) fail the run;
# the inputs are in build/fuzz/artifacts/.
fuzz: fuzz-build
	tools/fuzz $(FUZZ) $(FUZZ_SECONDS)

test-fuzz: fuzz-build
	@echo "== make test: fuzz smoke runs ($(FUZZ_QUICK_SECONDS) s per harness)"
	tools/fuzz $(FUZZ) $(FUZZ_QUICK_SECONDS)

# ThreadSanitizer over the tests of the threaded code (the loader, its token
# sources, states and the equal-steps plan it runs): its own build, only those
# test programs. Not part of `make test` (it rebuilds the core with TSan; see
# docs/reliability.md for its time and result).
TSAN_TESTS := loader_test token_source_test loader_state_test loader_stats_test train_plan_test
$(TSAN)/build.ninja: | venv
	cmake -S . -B $(TSAN) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSHARDKIT_SANITIZE=thread -DSHARDKIT_BUILD_CLI=OFF

test-tsan: venv $(TSAN)/build.ninja
	cmake --build $(TSAN) -j $(JOBS) --target $(TSAN_TESTS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --test-dir $(TSAN) --output-on-failure -j $(JOBS) \
	  -R '^(LoaderTest|TokenSourceTest|LoaderStateTest|StateRefusals|LoaderStatsTest|TrainPlan)[.]'

test-python: build
	@echo "== make test: Python tests (pytest, with every README and docs/ example)"
	PYTHONPATH=$(CURDIR)/python SHARDKIT_CLI=$(CURDIR)/$(DEV)/cli/shardkit \
	  $(PY) -m pytest -q

# pip install . must work: build the wheel (incrementally, in build/wheel-*),
# install it into a scratch venv that sees the project venv's packages, and
# check the console program and the module. The wheel's CMake gets the dev
# build's compiler (scikit-build-core would otherwise set CXX to Python's
# `g++`: ccache counts the compiler's name, and every compile would miss).
test-wheel: build
	@echo "== make test: the wheel (pip wheel -v: CMake's progress; incremental in build/wheel-*; compiles from the dev build's ccache)"
	CXX="$$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' $(DEV)/CMakeCache.txt)" \
	  $(PY) -m pip wheel -v --progress-bar off --no-build-isolation --no-deps -w build/dist .
	rm -rf build/wheel-venv && python3 -m venv --system-site-packages build/wheel-venv
	build/wheel-venv/bin/python $(PIP_INSTALL) --no-deps --force-reinstall build/dist/shardkit-*.whl
	cd build && wheel-venv/bin/shardkit shard --items 10 --world 3 --json >/dev/null
	cd build && wheel-venv/bin/python -c "import shardkit; assert shardkit.ShardPlan(10, 3).counts() == [4, 3, 3]; print('wheel ok:', shardkit.__file__)"

# Bench-only packages (requirements-bench.txt: Grain, TRL) live in their own
# venv, which sees the project venv's packages through a .pth file: installing
# them never changes what `make test` imports (TRL pulls Hugging Face datasets,
# which tests pick up as an oracle when present).
$(BENCH_VENV)/.stamp: requirements-bench.txt | venv
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(PY) -c "import site; print(site.getsitepackages()[0])" > \
	  "$$($(BENCH_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/project-venv.pth"
	@echo "== bench venv $(BENCH_VENV): pip install -r requirements-bench.txt"
	$(BENCH_VENV)/bin/python $(PIP_INSTALL) -r requirements-bench.txt
	touch $@

bench: build $(BENCH_VENV)/.stamp
	$(DEV)/bench/shardkit_bench --benchmark_min_time=0.2
	$(DEV)/bench/shardkit_packing_bench --benchmark_min_time=0.2
	PYTHONPATH=$(CURDIR)/python $(BENCH_VENV)/bin/python bench/packing_peers.py
	PYTHONPATH=$(CURDIR)/python $(BENCH_VENV)/bin/python bench/shuffle_epoch.py
	PYTHONPATH=$(CURDIR)/python $(BENCH_VENV)/bin/python bench/loader_vs_torch.py
	PYTHONPATH=$(CURDIR)/python $(BENCH_VENV)/bin/python bench/mixture_vs_megatron.py
	PYTHONPATH=$(CURDIR)/python $(BENCH_VENV)/bin/python bench/multimodal_decode.py
	PYTHONPATH=$(CURDIR)/python $(PY) bench/layout_vs_jax.py --devices 8192,16384

clean:
	rm -rf build
