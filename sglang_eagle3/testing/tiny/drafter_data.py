"""Training and evaluation data for the tiny drafter, taken from the tiny target on stdlib text.

The training data is made the way a user makes theirs: ``python -m sglang_eagle3.capture`` on
a real CPU SGLang server (57 to 65 s here: a server start, then 32k tokens), its layout recorded in
its manifest. The evaluation set, every hidden state, is the doctor's own in-process capture.
Taps of the in-process capture are Hugging Face ``output_hidden_states`` entries (hs[k] =
input of layer k), except the final layer's output, which is taken BEFORE the final norm with a
hook on ``model.norm``: HF's last hidden state is post-norm, while speculators (and SGLang/vLLM
capture) use the pre-norm value and apply the target's norm themselves.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from sglang_eagle3.data.train_data import TrainDataWriter
from sglang_eagle3.layout.taps import Tap
from sglang_eagle3.testing.tiny import corpus

_CHUNK = 16  # sequences per target forward


def token_windows(
    tokenizer_json: Path, split: str, count: int, length: int, seed: int, max_bytes: int
) -> torch.Tensor:
    """``count`` deterministic windows of ``length`` ids from a subset of one corpus split."""
    from tokenizers import Tokenizer

    from sglang_eagle3.testing.tiny.tokenizer import BOS_ID, EOS_ID

    tok = Tokenizer.from_file(str(tokenizer_json))
    files = corpus.shuffled_subset(corpus.stdlib_files(split), max_bytes)
    ids: list[int] = []
    for enc in tok.encode_batch(list(corpus.iter_texts(files)), add_special_tokens=False):
        ids += [BOS_ID, *enc.ids, EOS_ID]
    stream = torch.tensor(ids, dtype=torch.long)
    if stream.numel() <= length:
        raise RuntimeError(f"corpus split {split!r} is shorter than one window")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, stream.numel() - length, (count,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])


@torch.inference_mode()
def target_hidden_states(model, windows: torch.Tensor) -> torch.Tensor:
    """[B, L] ids -> [B, L, n+1, hidden]: index k is Tap(k) for every k in 0..n (the doctor's
    own capture, so training data and the doctor's evidence are taken alike)."""
    from sglang_eagle3.doctor.target_capture import all_taps

    return all_taps(model, windows, model.config.num_hidden_layers)[0]


def write_target_data(
    model,
    windows: torch.Tensor,  # [B, L]
    out_dir: Path,
    taps: Sequence[Tap],
) -> str:
    """Write ``windows`` with the given taps (in order) in speculators' layout; returns a
    digest of everything written, for the build record."""
    n = model.config.num_hidden_layers
    index = [t.hf_index for t in taps]
    digest = hashlib.sha256()
    with TrainDataWriter(out_dir, taps=list(taps), num_layers=n) as writer:
        for s in range(0, windows.shape[0], _CHUNK):
            chunk = windows[s : s + _CHUNK]
            hs = target_hidden_states(model, chunk)[:, :, index]
            for row, ids in zip(hs, chunk, strict=True):
                writer.add(row, ids)
                digest.update(row.numpy().tobytes())
    return digest.hexdigest()[:16]


def capture_target_data(
    target_dir: Path,
    windows: torch.Tensor,  # [B, L]
    out_dir: Path,
    fc_taps: Sequence[Tap],
) -> tuple[str, dict]:
    """Write ``windows`` through the capture CLI on a real CPU SGLang server (the fc taps, then
    the verifier tap); returns a digest of the hidden states and the CLI's summary."""
    from sglang_eagle3.data.train_data import TrainData

    with tempfile.TemporaryDirectory(prefix="tiny-drafter-capture-") as tmp:
        data = Path(tmp) / "windows.jsonl"
        data.write_text("".join(json.dumps({"input_ids": w}) + "\n" for w in windows.tolist()))
        cmd = [sys.executable, "-m", "sglang_eagle3.capture", "--data", str(data), "--out",
               str(out_dir), "--hidden-state-layout", ",".join(str(t) for t in fc_taps),
               "--model-path", str(target_dir), "--cpu", "--dtype", "float32", "--no-progress",
               "--json", "--log-dir", str(Path(tmp) / "logs"), "--concurrency", "1"]  # fmt: skip
        # one request at a time on one thread: batches of other sizes add in other orders, and
        # the shipped draft is checked against a digest of this data
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        if got.returncode != 0:
            logs = "".join(p.read_text()[-3000:] for p in sorted(Path(tmp, "logs").glob("*")))
            raise RuntimeError(f"capturing the tiny drafter's data failed ({' '.join(cmd)}):\n"
                               f"{got.stderr[-3000:]}\n{logs}")  # fmt: skip
    summary = json.loads(got.stdout)
    digest = hashlib.sha256()
    for sample in TrainData(out_dir):
        digest.update(sample.hidden_states.numpy().tobytes())
    return digest.hexdigest()[:16], summary
