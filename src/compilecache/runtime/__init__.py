"""The runtime layer: what the framework integrations call on every compile (load, save,
single-flight, miss explanations, history, prefetch manifests)."""
