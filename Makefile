# dspark: the two commands a fresh machine needs, and a few more.
#   make demo    install what is missing, build, and generate from the default stories260K model
#   make test    install what is missing, build (normal and ASan+UBSan), and run every test
#   make test-fast  build, then the fast tier: the unit tests and the quick CLI tests (ctest -L fast)
#   make fuzz    build the libFuzzer targets with clang and run each for FUZZ_SECONDS (default 300)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-fast test-asan unit bench bench-e2e fuzz clean

all: build

setup:
	@./scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

# The whole suite on the optimized build, then the unit tests, the CLI tests and the replay of the
# fuzz corpus (tests/fuzz/corpus: seeds and every crash reproducer) under AddressSanitizer and
# UndefinedBehaviorSanitizer.
test: build test-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The unit tests and the CLI tests that take under 15 s each (tests/CMakeLists.txt), 1-2 min at -j2.
test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L fast

test-asan: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDS_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -L "unit|cli|fuzz"

bench: build
	./scripts/bench.sh

# Speculation end to end on inflated stories260K (trains its drafter once: ~15 min with THREADS=2,
# ~25 on one core).
bench-e2e: build
	./scripts/bench_e2e.sh $(BUILD)

# libFuzzer (clang, ASan + UBSan) over every parser of external bytes: tests/fuzz/, scripts/fuzz.sh.
fuzz: setup
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./scripts/fuzz.sh $(FUZZ_BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
