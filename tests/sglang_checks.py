"""Checks shared by tests that run real SGLang servers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMPT = [0, 17, 300, 45, 99, 512, 7, 64]


def captured_and_hf(
    srv,
    target: Path,
    loader: Callable[[Path], Any] | None = None,
    max_new_tokens: int = 4,
    prompt: list[int] = PROMPT,
):
    """One greedy request to a capture-only server, next to HF's hidden states for it.

    Returns (got [positions, taps * hidden] fp64, HF hidden_states tuple, start): row r of
    `got` is token position `start + r`, over the prefill and every decode step. `loader`
    turns a target directory into an HF model (default: the tiny DeepSeek-V3 loader).
    """
    import torch

    if loader is None:
        from sglang_eagle3.checkpoint.hf_target import load_hf_target as loader

    params = {"max_new_tokens": max_new_tokens, "temperature": 0}
    req = {"input_ids": prompt, "return_hidden_states": True, "sampling_params": params}
    out = srv.post("/generate", req)
    chunks = out["meta_info"]["hidden_states"]
    if len(chunks) < 3:
        raise AssertionError(f"expected a prefill and >= 2 decode steps, got {len(chunks)}")
    rows = [torch.tensor(chunks[0])] + [torch.tensor(c).reshape(1, -1) for c in chunks[1:]]
    got = torch.cat(rows).double()
    # The prefill chunk covers only the tokens not already in SGLang's radix cache.
    start = len(prompt) - len(chunks[0])
    if start != out["meta_info"]["cached_tokens"]:
        raise AssertionError(f"prefill rows {len(chunks[0])} do not match the cached prefix")
    tokens = prompt + out["output_ids"]
    with torch.no_grad():
        hs = loader(target)(torch.tensor([tokens]), output_hidden_states=True).hidden_states
    return got, hs, start


def taps_diff(got, hs, start: int, indices) -> float:
    import torch

    ref = torch.cat([hs[i][0] for i in indices], -1).double()[start : start + len(got)]
    if ref.shape != got.shape:
        raise AssertionError(f"server gave {tuple(got.shape)}, HF taps {tuple(ref.shape)}")
    return (got - ref).abs().max().item()


def capture_vs_hf(
    srv, target: Path, hf_indices: tuple[int, ...], loader: Callable[[Path], Any] | None = None
) -> tuple[float, float]:
    """Ask a capture-only server for aux hidden states over a prefill and decode steps.

    Returns (max |diff| against HF hidden_states at `hf_indices`, max |diff| against the
    taps shifted by one; nan when a shifted index is past HF's last entry), in fp64. Rows
    are in SGLang's ascending capture order. `loader`: see `captured_and_hf`.
    """
    got, hs, start = captured_and_hf(srv, target, loader)
    shifted = tuple(i + 1 for i in hf_indices)
    shifted_diff = taps_diff(got, hs, start, shifted) if max(shifted) < len(hs) else float("nan")
    return taps_diff(got, hs, start, hf_indices), shifted_diff


def nearest_hf_indices(
    srv, target: Path, loader: Callable[[Path], Any] | None = None
) -> list[tuple[int, float]]:
    """For each tap the server returned, in its order: (the HF hidden_states index it is
    closest to, that max |diff|). Tells what a server captures for given ids."""
    got, hs, start = captured_and_hf(srv, target, loader)
    hidden = hs[0].shape[-1]
    if got.shape[-1] % hidden:
        raise AssertionError(f"row width {got.shape[-1]} is not a multiple of {hidden}")
    out = []
    for t in range(got.shape[-1] // hidden):
        tap = got[:, t * hidden : (t + 1) * hidden]
        diffs = [taps_diff(tap, hs, start, (i,)) for i in range(len(hs))]
        best = min(range(len(hs)), key=diffs.__getitem__)
        out.append((best, diffs[best]))
    return out


def generate(srv, text: str, n: int = 12) -> dict:
    """One greedy /generate of ``n`` tokens."""
    params = {"max_new_tokens": n, "temperature": 0}
    return srv.post("/generate", {"text": text, "sampling_params": params})


def assert_lossless(srv, prompts: list[str], want: dict[str, list[int]], figures, label: str):
    """Speculative greedy output equals plain greedy ``want`` on every prompt, one at a time
    and 8 concurrent, and the server really speculated."""
    from concurrent.futures import ThreadPoolExecutor

    outs = {p: generate(srv, p) for p in prompts}
    assert all(o["meta_info"]["spec_verify_ct"] > 0 for o in outs.values())  # it speculated
    got = {p: o["output_ids"] for p, o in outs.items()}
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(lambda p: generate(srv, p)["output_ids"], prompts))
    same = sum(got[p] == want[p] for p in prompts)
    figures.record(f"{label}: EAGLE-3 prompts equal to plain greedy", f"{same} of {len(prompts)}")
    assert got == want
    assert concurrent == [want[p] for p in prompts]
