"""Checkpoints on disk: config.json, safetensors, the target config, the draft schema and
its readers, the flat copy SGLang loads, and draft weights."""
