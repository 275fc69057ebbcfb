"""A mini LLM inference engine in plain PyTorch (paged KV cache, continuous batching)."""
