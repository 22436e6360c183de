"""The emitter of a standalone `run.py`: `run_template.py` filled with a bundle's data."""
