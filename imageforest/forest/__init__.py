"""The forest engine: flat storage and apply, level-wise trainer, weak learners, objectives, leaf models,
model files. It knows nothing about images or tasks beyond the objective it is handed."""
