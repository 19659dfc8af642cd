"""`python -m sglang_eagle3.tune`: predict the fastest speculative settings, and say why."""
