"""`python -m sglang_eagle3.launch`: SGLang with the layout applied and the flags resolved."""
