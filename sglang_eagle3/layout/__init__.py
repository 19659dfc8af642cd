"""The hidden-state layout: taps, id conventions, the layout and its capture plan.

Pure logic (no torch, no sglang): every other folder reads its vocabulary from here.
"""
