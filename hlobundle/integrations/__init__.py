"""hlobundle inside the serving and batch engines people already run (docs/deploy.md), each
behind its own extra and imported only when asked for:

- `hlobundle.integrations.mlserver`: `HloBundleRuntime`, an MLServer custom runtime
  (`pip install "hlobundle[mlserver]"`);
- `hlobundle.integrations.ray`: `BundlePredictor`, a callable class for Ray Data's
  `map_batches`, and `serve_deployment`, a Ray Serve application (`pip install "hlobundle[ray]"`);
- `hlobundle.integrations.kserve`: `HloBundleModel`, a KServe custom predictor, and its server
  command (`pip install "hlobundle[kserve]"`).

Each serves one function of a bundle given by path or by `oci://` / `https://` reference, with
`hlobundle serve`'s checks and trust rule: requests are combined (an engine's batching) only
along a symbolic batch dimension, and only when a key verified the bundle or the user trusts
its batching (`trust_batched`)."""
