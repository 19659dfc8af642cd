"""`python -m sglang_eagle3.doctor`: proves a drafter's wiring before serving."""
