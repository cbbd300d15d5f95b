# Everything a fresh machine needs, from the project's own files.
#   make demo   - set up, then run `ringleader demo` (coordinator + local workers + one sweep)
#   make test   - set up, check the generated stubs, run the test suite
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

.PHONY: setup demo test protos images push-images
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(TORCH)
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

demo: setup
	$(VENV)/bin/ringleader demo

test: setup
	$(PY) scripts/genproto.py --check
	$(PY) -m pytest

protos: setup
	$(PY) scripts/genproto.py

images:
	for image in $(IMAGES); do \
	  DOCKER_BUILDKIT=1 docker build -f deploy/docker/Dockerfile.$$image \
	    -t $(REGISTRY)/ringleader-$$image:$(VERSION) . || exit 1; \
	done

push-images: images
	for image in $(IMAGES); do docker push $(REGISTRY)/ringleader-$$image:$(VERSION) || exit 1; done
