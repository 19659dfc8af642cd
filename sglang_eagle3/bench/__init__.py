"""`python -m sglang_eagle3.bench`: speculative against plain decoding on live servers."""
