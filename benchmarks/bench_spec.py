"""Speculative decoding against plain decoding on live SGLang servers: tok/s, TTFT, ITL,
accept length (unbiased and SGLang's), accept histogram, losslessness; JSON, Markdown, PNG.

A thin wrapper around `python -m sglang_eagle3.bench` (the options and the definitions of every
figure are in that module's docstring and in benchmarks/README.md):

    python benchmarks/bench_spec.py --server plain=http://127.0.0.1:30000 \\
        --server eagle3=http://127.0.0.1:30001 [--prompts FILE.jsonl] [--concurrency 1,4,8]
    python benchmarks/bench_spec.py --launch "plain=--model-path T --cpu --dtype float32" \\
        --launch "eagle3=--model-path T --cpu --dtype float32 --speculative-algorithm EAGLE3 ..."
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_eagle3.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
