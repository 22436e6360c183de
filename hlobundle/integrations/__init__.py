"""hlobundle inside the serving and batch engines people already run (docs/deploy.md), each
behind its own extra (README.md, "Extras": `pip install "hlobundle[EXTRA]"`, or in a clone
`pip install ".[EXTRA]"`) and imported only when asked for:

- `hlobundle.integrations.mlserver`: `HloBundleRuntime`, an MLServer custom runtime
  (the mlserver extra);
- `hlobundle.integrations.ray`: `BundlePredictor`, a callable class for Ray Data's
  `map_batches`, and `serve_deployment`, a Ray Serve application (the ray extra);
- `hlobundle.integrations.kserve`: `HloBundleModel`, a KServe custom predictor, and its server
  command (the kserve extra).

Each serves one function of a bundle given by path or by `oci://` / `https://` reference, with
`hlobundle serve`'s checks and trust rule: requests are combined (an engine's batching) only
along a symbolic batch dimension, and only when a key verified the bundle or the user trusts
its batching (`trust_batched`)."""
