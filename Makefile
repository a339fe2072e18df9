# labkit: `make demo` and `make test` work as the very first command on a fresh
# Debian 12 or 13 machine (as root): each brings up what it needs, and is fast when done.
# `make demo` and `make lab` install what a student needs; `make test` adds the tests'
# tools (Slurm, munge, Chromium, PyTorch, Open MPI, the dev packages).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SYSTEM_PYTHON := /usr/bin/python3
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
PIP := $(PY) -m pip install -q --disable-pip-version-check
# frr: BGP and BFD in the routers of a routed fabric (fabric.routing: bgp); labkit starts
# its own daemons in each router's namespace, so the system service Debian enables is
# stopped and disabled where make installed it and systemd runs.
DEB_PACKAGES := mininet clang llvm libbpf-dev bpftool iperf3 tcpdump tshark iputils-ping \
	iproute2 ethtool python3-venv procps zlib1g-dev frr
# The tests' (and `make samples`'): Chromium renders figures to SVG (labkit figures),
# Slurm and munge run the batch executor's tests.
TEST_PACKAGES := chromium slurm-wlm munge
BPF_SOURCES := $(wildcard bpf/*.bpf.c)
BPF_OBJECTS := $(patsubst bpf/%.bpf.c,bpf/build/%.bpf.o,$(BPF_SOURCES))
BPF_HEADERS := $(wildcard bpf/include/*.h)
BPF_CFLAGS := -target bpf -O2 -g -Wall -Werror -Ibpf/build -Ibpf/include
HOTPATH := labkit/traffic/_hotpath.so
MPITIME := labkit/traffic/_mpitime.so
DELAYLINE := labkit/kernel/_delayline
# Your own PyTorch job as a workload (topologies/pytorch-ddp.yaml, the tests): Debian's CPU
# build of PyTorch, for Debian's /usr/bin/python3 (1.13 on Debian 12, 2.6 on Debian 13);
# PyPI's torch is a CUDA build of several GB. A job may name any interpreter of its own.
TORCH_PACKAGES := python3-torch
# Your own MPI job (topologies/mpi-allreduce.yaml, the tests): Debian's Open MPI and its
# mpi4py for /usr/bin/python3 (Open MPI 4.1 on Debian 12, 5.0 on Debian 13).
MPI_PACKAGES := openmpi-bin python3-mpi4py

.PHONY: setup dev system tools torch mpi mounts bpf bpf-objects hotpath mpitime delayline bpf-flags demo lab test bench \
	soak localise samples lint lock clean-build

# Under sudo, what make and labkit wrote in a user's checkout goes back to the user (the
# venv, bpf/build, Python's caches, runs): in their checkout, root owns only what sudo made.
HANDBACK = if [ "$$(id -u)" = 0 ] && [ -n "$${SUDO_UID:-}" ] && [ "$$SUDO_UID" != 0 ]; then \
	  find . -path ./.git -prune -o -uid 0 -exec chown -h "$$SUDO_UID:$$SUDO_GID" {} + ; fi

setup: system mounts $(VENV)/.installed bpf hotpath mpitime delayline
	@$(HANDBACK)

# What the tests, the linters and `make samples` add to setup.
dev: setup tools $(VENV)/.dev-installed
	@$(HANDBACK)

# Debian packages: installed only when one is missing.
system: PACKAGES = $(DEB_PACKAGES)
tools: PACKAGES = $(TEST_PACKAGES)
torch: PACKAGES = $(TORCH_PACKAGES)
mpi: PACKAGES = $(MPI_PACKAGES)
system tools torch mpi:
	@missing=$$(for p in $(PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "labkit setup: installing $$missing needs root (run as root or with sudo)"; exit 1; fi; \
	  echo "labkit setup: installing Debian packages:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; \
	  case " $$missing " in *" frr "*) if [ -d /run/systemd/system ]; then \
	    systemctl disable --now frr.service; fi;; esac; \
	fi

# bpffs for pins, tracefs for the qdisc tracepoints: mounted only when absent.
mounts:
	@if [ "$$(id -u)" = 0 ]; then \
	  mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf; \
	  mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing; \
	fi

# The venv uses Debian's Python so that Debian's Mininet module is importable; a .pth
# file exposes that one module and nothing else from the system's site-packages.
# Every Python package (and setuptools, which builds labkit) comes from $(LOCK): exact
# versions, hash-checked; labkit itself is then installed without dependencies. pip 23.3
# or later reads it: Debian 12's venv comes with pip 23.0, which in hash-checking mode takes
# the newest release for a package named with an extra (jsonschema[format-nongpl]) instead of
# the one the lock pins.
$(VENV)/.installed: pyproject.toml $(LOCK)
	@test -x $(PY) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PIP) 'pip>=23.3'
	@mkdir -p $(VENV)/debian-mininet
	@ln -sfn /usr/lib/python3/dist-packages/mininet $(VENV)/debian-mininet/mininet
	@echo "$(CURDIR)/$(VENV)/debian-mininet" > $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/debian-mininet.pth
	$(PIP) --require-hashes -r $(LOCK)
	$(PIP) --no-deps --no-build-isolation -e .
	@touch $@

# The same pins as $(LOCK), and the tests' and linters' packages.
$(VENV)/.dev-installed: $(VENV)/.installed $(DEV_LOCK)
	$(PIP) --require-hashes -r $(DEV_LOCK)
	@touch $@

# Refresh $(LOCK) and $(DEV_LOCK) on purpose: the newest releases within pyproject.toml's
# bounds, with hashes, resolved by pip-tools for Debian's Python in a throwaway venv; the
# dev lock is held to $(LOCK)'s pins. Review the diff, run `make test`, commit the three
# files together. `make lock LOCK_UPGRADE=` only adds what pyproject.toml gained and keeps
# every other pin as it is.
LOCK_UPGRADE ?= --upgrade
COMPILE := CUSTOM_COMPILE_COMMAND="make lock" .lock-venv/bin/pip-compile -q --generate-hashes \
	--all-build-deps --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links
lock:
	rm -rf .lock-venv && $(SYSTEM_PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --disable-pip-version-check pip-tools
	$(COMPILE) $(LOCK_UPGRADE) --extra notebooks -o $(LOCK) pyproject.toml
	$(COMPILE) $(LOCK_UPGRADE) --extra notebooks --extra dev -c $(LOCK) -o $(DEV_LOCK) pyproject.toml
	rm -rf .lock-venv

# compiled side by side, a clang per CPU (setup's own steps still run one after another)
bpf:
	@$(MAKE) --no-print-directory -q bpf-objects || \
	  $(MAKE) --no-print-directory -j$$(nproc) bpf-objects

bpf-objects: $(BPF_OBJECTS)

bpf/build/vmlinux.h:
	@mkdir -p bpf/build
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

bpf/build/%.bpf.o: bpf/%.bpf.c $(BPF_HEADERS) bpf/build/vmlinux.h
	clang $(BPF_CFLAGS) -c $< -o $@

# The rank agents' per-packet work in C (labkit/traffic/hotpath.py says why), loaded with ctypes.
hotpath: $(HOTPATH)

$(HOTPATH): labkit/traffic/hotpath.c
	clang -O2 -g -Wall -Werror -fPIC -shared -o $@ $< -lz

# An unmodified MPI job's collectives timed through MPI's profiling interface: the shim
# labkit preloads into the ranks mpirun starts (labkit/traffic/mpitime.c; no mpi.h needed).
mpitime: $(MPITIME)

$(MPITIME): labkit/traffic/mpitime.c
	clang -O2 -g -Wall -Werror -fPIC -shared -o $@ $<

# A link's propagation delay: this kernel has no qdisc that holds a packet for later, so
# labkit's own delay line forwards each delayed link's frames (labkit/kernel/delayline.c).
delayline: $(DELAYLINE)

$(DELAYLINE): labkit/kernel/delayline.c
	clang -O2 -g -Wall -Werror -o $@ $<

# A scenario's own classifier (lanes.program), compiled by labkit at run time with the
# the flags of labkit's own programs, for a user's (labkit.kernel.bpf.compile_object runs
# clang with them from this directory, as an argument list: no path goes through a shell)
bpf-flags: bpf/build/vmlinux.h
	@echo $(BPF_CFLAGS)

# --- the two commands the README shows first -------------------------------------------
# DEMO_ARGS: more for `labkit run`, e.g. make demo DEMO_ARGS="--policy fifo --duration 5".
demo: setup
	$(VENV)/bin/labkit run topologies/bottleneck.yaml $(DEMO_ARGS); status=$$?; $(HANDBACK); \
	exit $$status

# Tier 0 in two processes (pytest-xdist, a test file to a process: its fixtures are built
# once) beside the kernel tests that check no time; then the kernel tests that measure, one
# at a time on a quiet machine (tests/suite.py says why). The first failing part's status:
# pytest's 0 when all passed, 1 when some failed; 2 and more: interrupted or broken.
test: dev torch mpi
	$(PY) -m tests.suite; status=$$?; $(HANDBACK); exit $$status

# JupyterLab on the notebooks and labs, with the `labkit` kernel (this checkout's venv).
# LAB_ARGS: more for `labkit lab`, e.g. make lab LAB_ARGS="--port 9000 --no-browser".
lab: setup
	$(VENV)/bin/labkit lab $(LAB_ARGS)

# --- more --------------------------------------------------------------------------------
bench: setup
	$(PY) -m benchmarks

soak: setup
	$(PY) -m tests.soak

# 20 runs, each with one fault chosen by its seed: the summary must name its culprit in 18.
localise: setup
	$(PY) -m tests.localise

# Every shipped sample (data/sample/samples.yaml) recorded again at this revision, the
# figures in docs/figures/ drawn from them and the numbers the docs quote written from them:
# commit first (labkit samples --list: the plan).
samples: dev torch mpi
	$(VENV)/bin/labkit samples

# ruff, then mypy over the folders pyproject.toml's [tool.mypy] names: any error fails.
lint: dev
	$(VENV)/bin/ruff check labkit tests benchmarks
	$(VENV)/bin/mypy

clean-build:
	rm -rf bpf/build $(HOTPATH) $(MPITIME) $(DELAYLINE)
