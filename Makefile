# The two commands a newcomer needs: `make run` and `make test`. Both install what is missing
# (Debian packages, through scripts/install-deps.sh), build, and go.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
TRACES ?= ../shared/traces/alibaba-gpu-2023

.PHONY: all deps build build-asan run test test-release test-asan bench fgd format clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMERIDIAN_SANITIZE=ON

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

build-asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j $(JOBS)

# Until the control plane exists, the main job is the simulator on a synthetic hybrid estate.
run: build
	./$(BUILD)/meridian sim demo

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

test: test-release test-asan

# The published FGD benchmark, when the traces are present (see docs/benchmarks.md).
fgd: build
	./$(BUILD)/meridian sim fgd --nodes $(TRACES)/csv/openb_node_list_gpu_node.csv \
	  --tasks $(TRACES)/csv/openb_pod_list_default.csv --policy all --seeds 42-51 --inflate 1.3 \
	  --compare $(TRACES)/published-fgd/summary-allocation.txt

bench: build
	./$(BUILD)/meridian bench schedule --nodes 10000 --gpus-per-node 8 --pending 100000

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
