"""hlobundle's benchmarks: `python benchmarks/run.py [--quick] [--only NAME,...]` writes
benchmarks/RESULTS.md; `python benchmarks/accelerator.py` (by hand, on an accelerator's
machine) writes RESULTS-<platform>.md.

- run.py: the driver, each section's name (for `--only`) and title, and the report;
- harness.py: repetitions in turns, fresh processes in a user's environment, resident memory,
  a free port, the tables; bundles.py: the made-up bundles several sections measure;
- calls.py: a bundle's function under jit against native (`overhead`, `vmap`);
  language_model.py: the LM's decode (`lm`);
- startup.py: start-up and a fresh process's first result (`startup`, `first`);
  executables.py: a first result from a stored executable (`iree`, `first-result-executable`);
- packing.py: pack and load (`pack`, `column`, `scale`); usage.py: cost that grows with what is
  used (`usage`);
- trust.py: what the checks cost (`trust`, `children`, `foreign`, `sign`);
- distribution.py: registries and remote loading (`pull`, `remote`);
- serving.py: `hlobundle serve` (`serve`, `serve-uds`, `json`, `serve-many`), through
  serve_client.py, the client of the serving benchmarks; serve_cpu.py: serve's own CPU per
  request (`serve-cpu`); grpc_shm.py: a small infer over gRPC, with and without system shared
  memory (`grpc-shm`); serve_shm.py: the batching gain through system shared memory
  (`serve-shm`);
- pytorch.py: PyTorch models in, against eager PyTorch, and from_torch's time (`torch`);
- peers.py: the engines side by side (`peers`, `ray`), with peer_decode.py and ray_scaling.py,
  which run in the engines' own environments.

Each module imports the public API or the rooms, as the top floor does, and a backend only
through its door, `hlobundle._run._backends` (tests/test_layers.py checks it).
"""
