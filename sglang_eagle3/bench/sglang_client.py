"""Optional load generation by SGLang's own client, `python -m sglang.benchmark.serving`.

It measures throughput, TTFT and ITL the way SGLang's maintainers do (ITL per token, as ours),
so running it next to our client cross-checks our numbers. It cannot replace ours: its accept
length is the server-wide `avg_spec_accept_length` from /server_info (SGLang's biased formula,
averaged over everything the server ever served) and it keeps neither per-request draft counters
nor output token ids, so it can give neither the unbiased accept length nor losslessness.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

KEYS = (
    "output_throughput", "median_ttft_ms", "p90_ttft_ms", "median_itl_ms", "p90_itl_ms",
    "completed", "total_output_tokens", "duration", "accept_length",
)  # fmt: skip


def write_custom_dataset(prompts: Sequence[str], path: Path) -> Path:
    """Its `custom` dataset wants conversations; the second turn only sets an output length,
    which `--sharegpt-output-len` overrides."""
    with path.open("w") as f:
        for text in prompts:
            turns = [{"role": "user", "content": text}, {"role": "assistant", "content": "x x"}]
            f.write(json.dumps({"conversations": turns}) + "\n")
    return path


def sglang_serving_argv(
    url: str, dataset: Path, n: int, max_new: int, concurrency: int, temperature: float,
    output_file: Path, tokenizer: str | None,
) -> list[str]:  # fmt: skip
    argv = [
        sys.executable, "-m", "sglang.benchmark.serving", "--backend", "sglang",
        "--base-url", url, "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--num-prompts", str(n), "--sharegpt-output-len", str(max_new),
        "--max-concurrency", str(concurrency), "--temperature", str(temperature),
        "--output-file", str(output_file), "--disable-tqdm", "--warmup-requests", "1",
    ]  # fmt: skip
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    return argv


def run_sglang_serving(
    url: str, prompts: Sequence[str], max_new: int, concurrency: int, temperature: float,
    work: Path, tokenizer: str | None = None, timeout: float = 1800.0,
) -> dict:  # fmt: skip
    """Run it once; return its headline figures, or {"error": ...} with its output's tail."""
    work.mkdir(parents=True, exist_ok=True)
    tag = f"c{concurrency}-t{temperature:g}"
    dataset = write_custom_dataset(prompts, work / "sglang_custom_prompts.jsonl")
    out = work / f"sglang_serving_{tag}.jsonl"
    out.unlink(missing_ok=True)  # it appends
    argv = sglang_serving_argv(
        url, dataset, len(prompts), max_new, concurrency, temperature, out, tokenizer
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    (work / f"sglang_serving_{tag}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail), "argv": argv}
    last = json.loads(out.read_text().strip().splitlines()[-1])
    return {k: last.get(k) for k in KEYS} | {"argv": argv}
