# Everything a fresh machine needs, from the project's own files.
#   make demo   - set up, then run `ringleader demo` (coordinator + local workers + one sweep)
#   make test   - set up, check the generated stubs, run the tests a change needs (about 7-8 minutes
#                 on two quiet cores): all but the long fuzzing (marker slow) and the multihost beds
#   make test-all - the same, then those too: what CI runs (.ci/run, as root)
#   make images - build the coordinator and worker images (docker with BuildKit)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch's CPU build, 2.13.0+cpu: PyPI's torch==2.13.0 is the CUDA build on Linux x86_64 (about 16
# nvidia-* packages, several GB), so it comes from PyTorch's CPU index, except where the wheel is
# on local disk: the project's dev machines keep it in /opt/wheels (pip's find-links there), and
# cannot reach that index. GPU machines: `make TORCH=torch==2.13.0 TORCH_INDEX=` (the CUDA build).
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= $(if $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl),,https://download.pytorch.org/whl/cpu)
# dev: the test tools; worker: torch (already satisfied by $(TORCH)) and nvidia-ml-py.
EXTRAS ?= dev,worker
# Images: tagged with the package version (ringleader/__init__.py), pushed under $(REGISTRY).
# deploy/k8s/base/settings.yaml names the same registry for the Kubernetes manifests.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' ringleader/__init__.py)
REGISTRY ?= ghcr.io/ringleader
IMAGES := coordinator worker

# The tests `make test` leaves to `make test-all`: the REST API's long fuzzing, and the beds of
# hosts made of network namespaces (root only; skipped elsewhere).
QUICK_TESTS ?= -m "not slow and not multihost"
# make test runs the files on this many processes (pytest-xdist), a file's tests together in one
# (module fixtures stay shared): one process keeps two cores half idle while its daemons start or
# its tests wait (10:39 alone, 668 CPU-s). On 2 cores a third process no longer pays: 6:53-7:15
# against 7:10-7:28 on 2 (3 runs each, 2026-11-29): the cores are 86-88 % busy on 2 already
# (docs/results/2026-11-29-local-make-test-cpu), and it loads each test more. TEST_PROCS=0: one process.
TEST_PROCS ?= 2

.PHONY: setup demo test test-slow test-all tools protos images push-images
setup: $(VENV)/.installed

# constraints.txt: the versions every install path resolves (README, deploy/docker).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(TORCH)
	$(PY) -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	touch $@

demo: setup
	$(VENV)/bin/ringleader demo

test: setup tools
	$(PY) scripts/genproto.py --check
	$(PY) -m pytest $(QUICK_TESTS) $(if $(filter-out 0,$(TEST_PROCS)),-n $(TEST_PROCS) --dist loadfile)

# The long fuzzing and the multihost beds: what `make test` leaves out. CI runs both targets.
test-slow: setup tools
	$(PY) -m pytest -m "slow or multihost"

test-all: test test-slow

# System tools some tests drive; without them those tests are skipped (pytest's summary lists
# them). Says which, and how to get them: .ci/run installs them all when run as root.
tools:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || echo "make: chromium or chromedriver missing: tests/browser (the web UI) will be skipped; install them: apt-get install chromium chromium-driver"
	@command -v promtool >/dev/null || echo "make: promtool missing: the /metrics lint and the alerting rules checks (tests/integration/test_metrics.py, tests/unit/test_deploy.py) will be skipped; install it: apt-get install prometheus"
	@command -v kubectl >/dev/null || echo "make: kubectl missing: the Kubernetes manifest renders (tests/unit/test_k8s.py) will be skipped; .ci/run installs a pinned one as root"
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || echo "make: PostgreSQL (initdb) missing: the PostgreSQL store contract and failover tests will be skipped; install it: apt-get install postgresql"
	@[ "$$(id -u)" = 0 ] || echo "make: not root: tests/multihost (network namespaces) will be skipped by make test-all"

protos: setup
	$(PY) scripts/genproto.py

images:
	for image in $(IMAGES); do \
	  DOCKER_BUILDKIT=1 docker build -f deploy/docker/Dockerfile.$$image \
	    -t $(REGISTRY)/ringleader-$$image:$(VERSION) . || exit 1; \
	done

push-images: images
	for image in $(IMAGES); do docker push $(REGISTRY)/ringleader-$$image:$(VERSION) || exit 1; done
