# The two commands a newcomer needs: `make run` and `make test`. Both install what is missing
# (Debian packages, through scripts/install-deps.sh), build, and go.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_RUNS ?= 100000
FUZZ_SEED ?= 1
FUZZ_TIME ?= 0
JOBS ?= $(shell nproc)
E2E_JOBS ?= $(shell echo $$(( 2 * $(JOBS) )))
TRACES ?= ../shared/traces/alibaba-gpu-2023

.PHONY: all deps build build-asan run test test-release test-asan fuzz bench bench-api fgd format clean package

all: build

deps:
	@./scripts/install-deps.sh

# The Release build is the one `make run` runs, and the end-to-end tests' (the unit tests run in
# the sanitizer build: ADR 0043). A tree configured otherwise is configured again.
build: deps
	@test -f $(BUILD)/build.ninja && grep -qs '^MERIDIAN_UNIT_TESTS:BOOL=OFF' $(BUILD)/CMakeCache.txt || \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMERIDIAN_UNIT_TESTS=OFF
	ninja -C $(BUILD) -j $(JOBS)

# The sanitizer build is clang's: it compiles under ASan in half GCC's time (ADR 0042). A tree
# configured earlier with another compiler is configured afresh.
build-asan: deps
	@test -f $(ASAN_BUILD)/build.ninja && \
	  grep -qs '^CMAKE_CXX_COMPILER:.*clang++' $(ASAN_BUILD)/CMakeCache.txt || \
	  CC=clang CXX=clang++ cmake --fresh -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	    -DMERIDIAN_SANITIZE=ON -DMERIDIAN_UNIT_TESTS=ON
	ninja -C $(ASAN_BUILD) -j $(JOBS)

# The main job: a whole hybrid estate on this machine (a server, the example configuration, six
# local agents with simulated GPUs running real processes). Ctrl-C stops it all.
run: build
	./$(BUILD)/meridian server --dev

# The end-to-end tests mostly wait (on heartbeats, timeouts, child processes): the Release
# suite kept 1.06 cores busy at ctest -j4 here, and took 254 s against 396 at -j2 (ADR 0043).
test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(E2E_JOBS)

# The sanitizer build runs the unit tests and the end-to-end tests chosen in CMakeLists.txt
# (marked ASAN: the server's API, the agents and their tasks, the attacks, the CLI's input, GPU
# faults, single sign-on, the API document, the Slurm connector, arrays and the configuration
# file). Its tests are CPU-bound (1.74 cores at -j4), so they run at -j $(JOBS). Of the chosen
# files these do not run under ASan: their worth is a figure at scale or a file layout, and
# smaller tests run their code paths under ASan (10,000 idle connections, listings of large
# specs, 50,000 array elements, kill -9 during a stream of submissions: the agents' outage tests
# restart servers under ASan; the Debian package: its configuration's reader is ConfigFile's).
# To run everything under ASan, once make build-asan has configured its tree: cmake -B
# build-asan -DMERIDIAN_SANITIZE_E2E=ALL, then make test-asan ASAN_EXCLUDE= (ADR 0043).
ASAN_EXCLUDE ?= ^(StarvationTest\.TenThousandIdleConnectionsLeaveRoomForEveryoneElse|SecurityTest\.AListingOfLargeSpecsIsBoundedInBytesAndContinues|ArraysTest\.FiftyThousandElementsInOneRequestListedAsOneLine|AgentTest\.ServerKilledDuringSubmissionsLosesNoAcknowledgedJobAndRunsNoneTwice|Package\.InstallsIntoAScratchRootAndItsServerStartsFromThePackagedConfig|SlurmTest\.SlurmctldKilledAndBackLosesNoJobAndRunsNoneTwice)$$

test-asan: build-asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) $(if $(ASAN_EXCLUDE),-E '$(ASAN_EXCLUDE)')

test: test-release test-asan fuzz

$(FUZZ_BUILD)/build.ninja:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DMERIDIAN_FUZZ=ON

# The decoders of requests and documents under libFuzzer, FUZZ_RUNS inputs each from a fixed
# seed, so that `make test` is repeatable (a dozen seconds each here). To explore, by hand:
# make fuzz FUZZ_RUNS=-1 FUZZ_SEED=0 FUZZ_TIME=600. New inputs stay in $(FUZZ_BUILD)/corpus; the
# seeds, and inputs that once failed, are in fuzz/corpus.
fuzz: deps $(FUZZ_BUILD)/build.ninja
	ninja -C $(FUZZ_BUILD) -j $(JOBS) spec_fuzzer request_fuzzer oidc_fuzzer
	@for t in spec request oidc; do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  echo "fuzz: $${t}_fuzzer, $(FUZZ_RUNS) runs, seed $(FUZZ_SEED)"; \
	  ./$(FUZZ_BUILD)/$${t}_fuzzer -runs=$(FUZZ_RUNS) -seed=$(FUZZ_SEED) \
	    -max_total_time=$(FUZZ_TIME) -timeout=5 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t \
	    2>$(FUZZ_BUILD)/$${t}_fuzzer.log || { tail -50 $(FUZZ_BUILD)/$${t}_fuzzer.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FUZZ_BUILD)/$${t}_fuzzer.log; \
	done

# The published FGD benchmark, when the traces are present (see docs/benchmarks.md).
fgd: build
	./$(BUILD)/meridian sim fgd --nodes $(TRACES)/csv/openb_node_list_gpu_node.csv \
	  --tasks $(TRACES)/csv/openb_pod_list_default.csv --policy all --seeds 42-51 --inflate 1.3 \
	  --compare $(TRACES)/published-fgd/summary-allocation.txt

bench: build
	./$(BUILD)/meridian bench schedule --nodes 10000 --gpus-per-node 8 --pending 100000

bench-api: build
	./$(BUILD)/meridian bench api --clients 16 --seconds 10

# The Debian package (CPack): $(BUILD)/meridian_VERSION_ARCH.deb. See docs/operations.md.
package: build
	cd $(BUILD) && cpack -G DEB

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
