"""The embedded engine: continuous batching over a transformers causal LM (torch imported here)."""
