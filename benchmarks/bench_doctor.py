"""Time and memory of the doctor on a Kimi-K2.5-shaped drafter, on CPU.

    python benchmarks/bench_doctor.py [--tokens 1000] [--steps 3] [--keep DIR]

Writes, into a temporary directory, a flat (SGLang-style) EAGLE-3 draft shaped like
AQ-MedAI/Kimi-K25-eagle3 (hidden 7168, 64 heads x 128, MLP 18432, one decoder layer, target
vocab 163840, draft vocab 32000 with d2t, bf16, random weights: 4.8 GB with its embedding) and
speculators-layout data for ``--tokens`` tokens with 3 fc taps plus the verifier tap. Then runs
``python -m sglang_eagle3.doctor`` in a child process and prints its wall time and peak RSS
(the child's own: the weights written here do not count). Goal: < 60 s, < 8 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HIDDEN, HEADS, HEAD_DIM, MLP = 7168, 64, 128, 18432
VOCAB, DRAFT_VOCAB, LAYERS = 163840, 32000, 61
TAPS = ["layer:1", "layer:29", "layer:57"]  # hs[2], hs[30], hs[58]: Kimi drafts' [2, 30, 58]


def shapes() -> dict[str, tuple[int, ...]]:
    attn_in = 2 * HIDDEN  # first layer: cat([embeds, hidden])
    p = "layers.0."
    return {
        "embed_tokens.weight": (VOCAB, HIDDEN),
        "fc.weight": (HIDDEN, 3 * HIDDEN),
        p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, attn_in),
        p + "self_attn.k_proj.weight": (HEADS * HEAD_DIM, attn_in),
        p + "self_attn.v_proj.weight": (HEADS * HEAD_DIM, attn_in),
        p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
        p + "mlp.gate_proj.weight": (MLP, HIDDEN),
        p + "mlp.up_proj.weight": (MLP, HIDDEN),
        p + "mlp.down_proj.weight": (HIDDEN, MLP),
        p + "input_layernorm.weight": (HIDDEN,),
        p + "post_attention_layernorm.weight": (HIDDEN,),
        p + "hidden_norm.weight": (HIDDEN,),
        "norm.weight": (HIDDEN,),
        "lm_head.weight": (DRAFT_VOCAB, HIDDEN),
    }


def write_streaming(path: Path, gen: torch.Generator) -> None:
    """A safetensors file written tensor by tensor (row blocks), so this process never holds
    the 4.8 GB at once. Layout: 8-byte header length, JSON header, data in header order."""
    specs = shapes()
    header, offset = {}, 0
    for name, shape in specs.items():
        n = 2 * int(torch.tensor(shape).prod())
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    hot = torch.randperm(VOCAB, generator=gen)[:DRAFT_VOCAB].sort().values
    d2t = (hot - torch.arange(DRAFT_VOCAB)).to(torch.int64)
    header["d2t"] = {
        "dtype": "I64",
        "shape": [DRAFT_VOCAB],
        "data_offsets": [offset, offset + 8 * DRAFT_VOCAB],
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in specs.items():
            if len(shape) == 1:
                t = 1 + 0.05 * torch.randn(shape, generator=gen)
                f.write(t.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
                continue
            std = 0.02 if name != "embed_tokens.weight" else 0.01
            for s in range(0, shape[0], 2048):
                rows = min(2048, shape[0] - s)
                t = torch.randn(rows, shape[1], generator=gen) * std
                f.write(t.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
        f.write(d2t.numpy().tobytes())


def write_draft(out: Path, gen: torch.Generator) -> None:
    out.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": MLP,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 262144,
        "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": [2, 30, 58],
            "hidden_state_layout": TAPS,
        },
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_streaming(out / "model.safetensors", gen)


def write_data(out: Path, tokens: int, gen: torch.Generator) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sglang_eagle3.data.train_data import TrainDataWriter

    scales = torch.tensor([4.0, 20.0, 60.0, 90.0])[None, :, None]  # norms grow with depth
    with TrainDataWriter(
        out, taps=[*TAPS, "layer:60"], num_layers=LAYERS, dtype=torch.bfloat16
    ) as w:
        left, seq = tokens + 1, 512  # +1: T tokens give T-1 draft positions per sample
        while left > 1:
            n = min(seq, left)
            hs = torch.randn(n, 4, HIDDEN, generator=gen) * scales / HIDDEN**0.5
            w.add(hs, torch.randint(0, VOCAB, (n,), generator=gen))
            left -= n - 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write here and keep (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_doctor_") as tmp:
        root = args.keep or Path(tmp)
        gen = torch.Generator().manual_seed(0)
        t0 = time.monotonic()
        if not (root / "draft" / "model.safetensors").is_file():
            write_draft(root / "draft", gen)
            write_data(root / "data", args.tokens, gen)
        print(f"wrote draft + data in {time.monotonic() - t0:.1f} s under {root}")
        cmd = [
            sys.executable, "-m", "sglang_eagle3.doctor", "--draft", str(root / "draft"),
            "--data", str(root / "data"), "--max-tokens", str(args.tokens),
            "--steps", str(args.steps), "--json", "--no-progress",
        ]  # fmt: skip
        t1 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parents[1])
        wall = time.monotonic() - t1
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB -> GiB
        if proc.returncode not in (0, 1):
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        report = json.loads(proc.stdout)
        for row in report["candidates"]:
            acc = row["step_accuracy"]
            print(f"  {row['text']:<34} evaluable={row['evaluable']} step accuracies={acc}")
        print(
            f"doctor: {args.tokens} tokens x {args.steps} steps, "
            f"{sum(r['evaluable'] for r in report['candidates'])} evaluable candidates, "
            f"torch threads {torch.get_num_threads()}: wall {wall:.1f} s, peak RSS {peak:.2f} GiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
