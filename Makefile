# One venv, one editable install; every target installs first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo bench bench-imaging bench-unsupervised lint gallery clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

test: install
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest

demo: install
	$(BIN)/python examples/demo.py --out demo_out

gallery: install
	$(BIN)/python examples/gallery.py --out gallery

bench: install
	$(BIN)/python benchmarks/engine_vs_sklearn.py

bench-imaging: install
	$(BIN)/python benchmarks/imaging.py

# Long: Isomap and SpectralEmbedding at n = 20,000 take minutes each.
bench-unsupervised: install
	$(BIN)/python benchmarks/unsupervised_vs_sklearn.py

lint: install
	$(BIN)/python -m ruff check .

clean:
	rm -rf $(VENV) demo_out gallery depth_parts_out .pytest_cache
