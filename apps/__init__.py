"""Applications built on the imageforest engine, imported as ``imageforest.apps.<name>``.

Each application is one package: a headless library (the Python API), a ``cli.py`` whose click commands the
``imageforest`` command registers lazily, a ``README.md`` and its models.
"""
