"""Checks shared by tests that run real SGLang servers."""

from __future__ import annotations

from pathlib import Path


def capture_vs_hf(srv, target: Path, hf_indices: tuple[int, ...]) -> tuple[float, float]:
    """Ask a capture-only server for aux hidden states over a prefill and decode steps.

    Returns (max |diff| against HF hidden_states at `hf_indices`, max |diff| against the
    taps shifted by one), in fp64. Rows are in SGLang's ascending capture order.
    """
    import torch

    from sglang_eagle3.checkpoint.hf_target import load_hf_target

    prompt = [0, 17, 300, 45, 99, 512, 7, 64]
    params = {"max_new_tokens": 4, "temperature": 0}
    req = {"input_ids": prompt, "return_hidden_states": True, "sampling_params": params}
    out = srv.post("/generate", req)
    chunks = out["meta_info"]["hidden_states"]
    if len(chunks) < 3:
        raise AssertionError(f"expected a prefill and >= 2 decode steps, got {len(chunks)}")
    rows = [torch.tensor(chunks[0])] + [torch.tensor(c).reshape(1, -1) for c in chunks[1:]]
    got = torch.cat(rows).double()  # [positions, taps * hidden]
    # The prefill chunk covers only the tokens not already in SGLang's radix cache.
    start = len(prompt) - len(chunks[0])
    if start != out["meta_info"]["cached_tokens"]:
        raise AssertionError(f"prefill rows {len(chunks[0])} do not match the cached prefix")
    tokens = prompt + out["output_ids"]
    with torch.no_grad():
        hs = load_hf_target(target)(torch.tensor([tokens]), output_hidden_states=True)
    hs = hs.hidden_states

    def diff(indices) -> float:
        ref = torch.cat([hs[i][0] for i in indices], -1).double()[start : start + len(got)]
        return (got - ref).abs().max().item()

    return diff(hf_indices), diff(tuple(i + 1 for i in hf_indices))
