"""Time and memory of the doctor, on CPU: three rows, each selected by a flag.

    python benchmarks/bench_doctor.py [--kimi] [--data-free] [--server] [--tokens 1000]
        [--steps 3] [--keep DIR]

--kimi (the default when no row is named): writes, into a temporary directory, a flat
(SGLang-style) EAGLE-3 draft shaped like AQ-MedAI/Kimi-K25-eagle3 (hidden 7168, 64 heads x 128,
MLP 18432, one decoder layer, target vocab 163840, draft vocab 32000 with d2t, bf16, random
weights: 4.8 GB with its embedding) and speculators-layout data for ``--tokens`` tokens with 3 fc
taps plus the verifier tap. Then runs ``python -m sglang_eagle3.doctor`` in a child process and
prints its wall time and peak RSS (the child's own: the weights written here do not count).
Goal: < 60 s, < 8 GB on 2 cores.

--data-free: the doctor on the tiny target and trained drafter with no --data (the target runs
in the doctor's process on its built-in prompts): wall time, peak RSS and tokens scored. Goal:
< 60 s on 2 cores with the models cached (printed, not asserted).

--server: a capture-mode SGLang on the tiny target (through the launcher, CPU harness), then the
doctor --server against it: time per 1,000 tokens, bytes moved per token, and the tap payload
per token they compare with. The server is stopped before the row prints.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HIDDEN, HEADS, HEAD_DIM, MLP = 7168, 64, 128, 18432
VOCAB, DRAFT_VOCAB, LAYERS = 163840, 32000, 61
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # sglang_eagle3 without an install
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


def print_candidates(report: dict) -> None:
    for row in report["candidates"]:
        acc = row["step_accuracy"]
        print(f"  {row['text']:<34} evaluable={row['evaluable']} step accuracies={acc}")


def run_child(cmd: list[str]) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, wall s, peak RSS GiB) of one child. os.wait4 gives this
    child's own rusage: RUSAGE_CHILDREN would be the max over every child reaped so far."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
        out.seek(0), err.seek(0)
        peak = usage.ru_maxrss / 1024**2  # KiB -> GiB
        return proc.returncode, out.read(), err.read(), wall, peak


def doctor(cmd: list[str]) -> tuple[int, dict | None, float, float]:
    """(exit code, --json report or None, wall s, peak RSS GiB) of one doctor child."""
    code, out, err, wall, peak = run_child([sys.executable, "-m", "sglang_eagle3.doctor", *cmd])
    if code not in (0, 1):  # 0 fine, 1 a verdict; anything else measured nothing
        print(f"doctor exited {code}:\n{err[-3000:]}", file=sys.stderr)
        return code, None, wall, peak
    return code, json.loads(out), wall, peak


def kimi_row(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench_doctor_") as tmp:
        root = args.keep or Path(tmp)
        gen = torch.Generator().manual_seed(0)
        t0 = time.monotonic()
        if not (root / "draft" / "model.safetensors").is_file():
            write_draft(root / "draft", gen)
            write_data(root / "data", args.tokens, gen)
        print(f"wrote draft + data in {time.monotonic() - t0:.1f} s under {root}")
        code, report, wall, peak = doctor([
            "--draft", str(root / "draft"), "--data", str(root / "data"),
            "--max-tokens", str(args.tokens), "--steps", str(args.steps), "--json", "--no-progress",
        ])  # fmt: skip
        if report is None:
            return code
        print_candidates(report)
        print(
            f"doctor: {args.tokens} tokens x {args.steps} steps, "
            f"{sum(r['evaluable'] for r in report['candidates'])} evaluable candidates, "
            f"torch threads {torch.get_num_threads()}: wall {wall:.1f} s, peak RSS {peak:.2f} GiB"
        )
    return 0


def tiny_models():
    """The tiny target and trained drafter (cached; the first call trains for minutes, in
    this process: not part of any figure below)."""
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    t0 = time.monotonic()
    d = tiny_drafter()
    print(f"tiny target {d.target_dir}\ntiny drafter {d.draft_dir}")
    print(f"models ready in {time.monotonic() - t0:.1f} s")
    return d


def data_free_row(args: argparse.Namespace) -> int:
    d = tiny_models()
    code, report, wall, peak = doctor([
        "--draft", str(d.draft_dir), "--target", str(d.target_dir), "--steps", str(args.steps),
        "--json", "--no-progress",
    ])  # fmt: skip
    if report is None:
        return code
    print_candidates(report)
    print(
        f"doctor data-free (in-process target, built-in prompts), exit {code}: "
        f"{report['source']['scored_tokens']} tokens scored, wall {wall:.1f} s, "
        f"peak RSS {peak:.2f} GiB (goal: < 60 s on 2 cores with models cached)"
    )
    return 0


def doctor_taps(draft: Path, target: Path) -> str:
    """The taps the data-free doctor captures for this draft and target, as
    ``run_data_free.captured_evidence`` picks them (no --search). Should they drift, the
    doctor refuses the server and names the list it needs."""
    from sglang_eagle3.doctor.candidates import draft_layouts, eagle_config_ids
    from sglang_eagle3.doctor.data_free import needed_taps, plausible_layouts, search_range
    from sglang_eagle3.doctor.run import target_family
    from sglang_eagle3.doctor.target import target_config

    cfg = target_config(target)
    n = cfg["num_hidden_layers"]
    lay = draft_layouts(draft, num_layers=n, target_hidden_size=cfg["hidden_size"],
                        family=target_family(str(target)))  # fmt: skip
    plausible = plausible_layouts(eagle_config_ids(draft)[0], lay.num_aux, n)
    wide = search_range(plausible, lay.num_aux, n) if lay.declared is None else ()
    return ",".join(str(t) for t in needed_taps(lay, n, search_taps=wide))


def server_row(args: argparse.Namespace) -> int:
    from sglang_eagle3.doctor.server_capture import CAPTURE_ROUTE
    from sglang_eagle3.launch.server_process import sglang_server

    d = tiny_models()
    taps = doctor_taps(d.draft_dir, d.target_dir)
    flags = ["--cpu", "--dtype", "float32", "--attention-backend", "torch_native",
             "--enable-return-aux-hidden-states", "--hidden-state-layout", taps,
             "--disable-radix-cache"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_doctor_server_") as tmp:
        log = (args.keep or Path(tmp)) / "server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        srv = sglang_server(d.target_dir, flags, log, module="sglang_eagle3.launch",
                            env={"OMP_NUM_THREADS": "1"})  # fmt: skip
        print(f"capture-mode server, taps {taps}, log {log}")
        srv.start()
        try:
            t0 = time.monotonic()
            srv.wait_ready(timeout=600)
            print(f"server ready in {time.monotonic() - t0:.1f} s at {srv.url}")
            state = srv.get(CAPTURE_ROUTE)
            code, report, wall, peak = doctor([
                "--draft", str(d.draft_dir), "--server", srv.url, "--steps", str(args.steps),
                "--json", "--no-progress",
            ])  # fmt: skip
        finally:
            srv.stop()
    if report is None:
        return code
    src = report["source"]
    hidden, num_taps = int(state["hidden_size"]), len(state["capture_order"])
    fp32, bf16 = torch.float32.itemsize, torch.bfloat16.itemsize
    payload = hidden * num_taps * fp32  # what the rows weigh as binary fp32, not JSON text
    kimi = HIDDEN * len(TAPS) * bf16
    print_candidates(report)
    print(
        f"doctor --server, exit {code}: {src['scored_tokens']} tokens scored, "
        f"{src['tokens_with_taps']} tokens with taps in {src['seconds']} s; "
        f"doctor child wall {wall:.1f} s, peak RSS {peak:.2f} GiB\n"
        f"  time per 1,000 tokens: {src['seconds_per_1000_tokens']} s\n"
        f"  bytes moved per token: {src['bytes_per_token']} (JSON over HTTP), against a tap "
        f"payload of {hidden} hidden x {num_taps} taps x {fp32} bytes (fp32) = {payload} bytes: "
        f"{src['bytes_per_token'] / payload:.1f}x\n"
        f"  Kimi-K2.5 tap payload (arithmetic, not a measurement): {HIDDEN} hidden x "
        f"{len(TAPS)} taps x {bf16} bytes (bf16) = {kimi} bytes per token"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kimi", action="store_true", help="the Kimi-shaped row (the default)")
    ap.add_argument("--data-free", action="store_true", help="tiny models, no --data")
    ap.add_argument("--server", action="store_true", help="tiny models, a capture-mode server")
    ap.add_argument("--tokens", type=int, default=1000, help="Kimi row: tokens of data")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write here and keep (default: a temp dir)")
    args = ap.parse_args()
    rows = [f for f, on in ((kimi_row, args.kimi), (data_free_row, args.data_free),
                            (server_row, args.server)) if on] or [kimi_row]  # fmt: skip
    codes = [row(args) for row in rows]
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    raise SystemExit(main())
