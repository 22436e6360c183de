"""The emitters: a standalone `run.py` (`run_template.py` or `run_iree_template.py` filled with a
bundle's data) and a ReactantServer.jl model bundle. Above `_run` and `_output` (floor 5, beside
`_write`), below `_cli`."""
