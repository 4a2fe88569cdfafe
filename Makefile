# One venv, one editable install; every target installs first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo demo-engine bench-localize bench-detect bench-cars bench bench-imaging bench-unsupervised lint gallery \
	clean

install: $(STAMP)

$(STAMP): pyproject.toml plugins/napari-imageforest/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	sh plugins/napari-imageforest/system-packages.sh
	# uv resolves and installs the same versions as pip in a fifth of the time (15 s against 70 s here); pip is the
	# fallback wherever uv cannot be had or cannot reach the index. Both leave compiled bytecode beside the packages,
	# and so does compileall for the project's own sources: where PYTHONDONTWRITEBYTECODE is set, every process would
	# otherwise compile every module it imports (2.5 s of a 3.2 s `imageforest localize`)
	( $(BIN)/python -m pip install --quiet uv && VIRTUAL_ENV=$(VENV) $(BIN)/uv pip install --quiet --compile-bytecode \
		--python $(BIN)/python -e ".[dev,dask,dicom,zarr]" -e "./plugins/napari-imageforest[testing]" ) \
	|| $(BIN)/python -m pip install --quiet -e ".[dev,dask,dicom,zarr]" -e "./plugins/napari-imageforest[testing]"
	$(BIN)/python -m compileall -q imageforest apps plugins > /dev/null
	# numba's cache, filled on both cores: the engine's common kernels, its wider settings and the papers' variants,
	# then every installed application's warm-up (found through the imageforest.apps entry points), each in a process
	$(BIN)/python -m imageforest.warmup --all --jobs 3
	touch $(STAMP)

# Both cores, each test module on one worker so that its module fixtures (trained models) are built once. Only the
# pytest plugins the tests use are loaded: pytest rewrites the asserts of every module of an auto-loaded plugin's
# package as it is imported (all of napari's), which cost each worker seconds of every run.
PYTEST_PLUGINS := -p xdist.plugin -p pytest_xvfb -p pytestqt.plugin -p napari.utils._testsupport \
	-p _hypothesis_pytestplugin -p pytest_timeout
test: install
	$(BIN)/python -m ruff check .
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(BIN)/python -m pytest $(PYTEST_PLUGINS) -n 2 --dist loadfile --timeout 900

# The main job: localize the organs of a generated head-and-neck phantom with the shipped default model.
demo: install
	$(BIN)/python -m imageforest.apps.localize.scripts.demo --out demo_out

demo-engine: install
	$(BIN)/python examples/demo.py --out demo_out

gallery: install
	$(BIN)/python examples/gallery.py --out gallery

bench: install
	$(BIN)/python benchmarks/engine/vs_sklearn.py

# Cross-validated CT localization against the body-relative mean box and multi-atlas registration (long).
bench-localize: install
	mkdir -p bench_out
	$(BIN)/python benchmarks/localize/cross_validate.py ../shared/data/openkbp-hn --json bench_out/localize_eval.json

# Cross-validated horse detection beside dlib's HOG detector (installed here, a benchmark-only dependency; long).
bench-detect: install
	$(BIN)/python -m pip install --quiet dlib-bin
	mkdir -p bench_out
	$(BIN)/python benchmarks/detect/horses.py --json bench_out/detect_eval.json

# Multi-view cars with viewpoint: the shipped car model and dlib's HOG detectors on the 3 validation cars (long).
bench-cars: install
	$(BIN)/python -m pip install --quiet dlib-bin
	mkdir -p bench_out
	$(BIN)/python benchmarks/detect/cars.py --model apps/detect/models/cars.npz --json bench_out/cars_val.json

bench-imaging: install
	$(BIN)/python benchmarks/imaging/vs_numpy.py

# Long: Isomap and SpectralEmbedding at n = 20,000 take minutes each.
bench-unsupervised: install
	$(BIN)/python benchmarks/engine/unsupervised_vs_sklearn.py

lint: install
	$(BIN)/python -m ruff check .

clean:
	rm -rf $(VENV) demo_out gallery depth_parts_out .pytest_cache
