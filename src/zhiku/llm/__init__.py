"""The shared LLM layer: settings, the cached chat service, prompts (see docs/transforms.md)."""
