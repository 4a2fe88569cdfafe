"""Estimators over the forest engine, with scikit-learn conventions."""
