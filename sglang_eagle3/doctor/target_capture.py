"""The doctor's own evidence: the target's greedy continuation of prompts, with its taps.

Each sample is one prompt plus what the target generated from it greedily, with the hidden
states of the taps the candidates need. Every position is scored against the target's own
greedy token there (what speculators trains against): on the prompt's text, as on training
data, and on the continuation, which is what a server verifies. The replay (serving's walk)
covers only the continuation, so it walks the very sequence a speculative server generates.
The last generated token is dropped: a server never runs it, so it has no hidden state there
either, and the in-process and server sources give the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sglang_eagle3.data.train_data import DataInfo, Sample
from sglang_eagle3.doctor.evaluate import progress_bar
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import Tap


@dataclass
class CapturedData:
    """Samples the doctor captured itself, read like ``TrainData``."""

    info: DataInfo
    samples: list[Sample]
    source: dict = field(default_factory=dict)  # kind, engine, prompts, tokens ... (JSON)

    def __iter__(self):
        return iter(self.samples)

    def __len__(self) -> int:
        return len(self.samples)


def make_sample(
    index: int,
    where: str,
    prompt_len: int,
    ids: Sequence[int],  # prompt + continuation
    rows: torch.Tensor,  # [>= len(ids) - 1, num_taps, hidden]: row u is token u's taps
    truth: Sequence[int],  # [>= len(ids) - 1]: the target's greedy token after token u
) -> Sample:
    seq = len(ids) - 1
    if rows.shape[0] < seq or len(truth) < seq:
        got = f"{rows.shape[0]} hidden-state rows and {len(truth)} greedy tokens"
        raise WiringError(f"{got} for {seq} tokens", path=where)
    truth_t = torch.tensor(list(truth[:seq]), dtype=torch.long)
    walk = torch.zeros(seq, dtype=torch.bool)
    # a server's first draft follows the prefill's own token: it predicts token prompt_len + 1
    walk[prompt_len:] = True
    return Sample(
        index=index,
        path=where,
        hidden_states=rows[:seq].float(),
        input_ids=torch.tensor(list(ids[:seq]), dtype=torch.long),
        loss_mask=truth_t >= 0,
        truth=truth_t,
        walk_mask=walk,
    )


def captured_info(where: str, fmt: str, samples: list[Sample], taps, num_layers: int) -> DataInfo:
    if not samples:
        raise WiringError("no sample was captured", path=where)
    hs = samples[0].hidden_states
    return DataInfo(
        path=where,
        format=fmt,
        num_samples=len(samples),
        num_taps=hs.shape[1],
        hidden_size=hs.shape[2],
        dtype=str(hs.dtype).removeprefix("torch."),
        taps=tuple(taps),
        num_layers=num_layers,
        taps_source="captured by the doctor",
    )


def scored_tokens(samples: Sequence[Sample]) -> int:
    return sum(int(s.loss_mask.sum()) for s in samples)


def check_context(encoded: Sequence[list[int]], max_new_tokens: int, context: int | None) -> None:
    """Refuse, before the model loads, a prompt the target cannot read with its continuation:
    past its positions it runs for minutes and scores garbage (a 10,502-token line on a
    2,048-position target ran 208 s, then blamed the drafter)."""
    if not context:
        return
    for i, ids in enumerate(encoded):
        if len(ids) + max_new_tokens > context:
            raise WiringError(
                f"prompt {i + 1} has {len(ids)} tokens; with --max-new-tokens {max_new_tokens} "
                f"that passes the target's {context} positions",
                fix=f"keep each prompt under {context - max_new_tokens} tokens (or lower "
                "--max-new-tokens)",
            )


@torch.inference_mode()
def capture_in_process(
    target_dir: str | Path,
    prompts: Sequence[str],
    taps: Sequence[Tap],
    *,
    num_layers: int,
    max_new_tokens: int,
    max_tokens: int,
    progress: bool | None = None,
) -> CapturedData:
    """Run the target with Hugging Face transformers (fp32) on this machine."""
    from transformers import AutoTokenizer

    from sglang_eagle3.doctor.target import load_hf, target_config

    target_dir = Path(target_dir)
    cfg = target_config(target_dir)
    try:
        tok = AutoTokenizer.from_pretrained(str(target_dir))
    except (OSError, ValueError) as err:
        raise WiringError(
            f"cannot load the target's tokenizer ({err})",
            path=str(target_dir),
            fix="point --target at a model directory with its tokenizer files",
        ) from None
    encoded = [tok(text).input_ids for text in prompts]
    check_context(encoded, max_new_tokens, cfg.get("max_position_embeddings"))
    model = load_hf(target_dir, cfg)
    index = [t.hf_index for t in taps]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    samples: list[Sample] = []
    bar = progress_bar(max_tokens, progress)
    try:
        for i, ids in enumerate(encoded):
            if scored_tokens(samples) >= max_tokens:
                break
            prompt = torch.tensor([ids], dtype=torch.long)
            out = model.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
            ids = out[0].tolist()
            hs, logits = all_taps(model, out[:, :-1], num_layers)
            truth = logits[0].argmax(-1).tolist()
            samples.append(make_sample(i, f"prompt {i}", prompt.shape[1], ids,
                                       hs[0][:, index], truth))  # fmt: skip
            bar.update(int(samples[-1].loss_mask.sum()))
    finally:
        bar.close()
    info = captured_info(str(target_dir), "in-process target", samples, taps, num_layers)
    source = {
        "kind": "in-process target",
        "engine": f"Hugging Face transformers ({type(model).__name__}, float32)",
        "prompts": len(samples),
        "scored_tokens": scored_tokens(samples),
    }
    return CapturedData(info, samples, source)


def all_taps(model, ids: torch.Tensor, num_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] ids -> ([B, L, n+1, hidden], logits [B, L, vocab]): index k is Tap(k) (k = n:
    the last layer's output BEFORE the final norm, which HF's hidden_states replaces by the
    normed value)."""
    captured: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_hook(lambda m, i, o: captured.append(i[0]))
    try:
        out = model(input_ids=ids, output_hidden_states=True)
    finally:
        hook.remove()
    hs = list(out.hidden_states[:num_layers]) + [captured[-1]]
    return torch.stack(hs, dim=2), out.logits
