"""The launcher reads a command line as SGLang's own parser will: prefixes, aliases and
repeats resolve the same way (checked against SGLang's parser on a corpus), and what SGLang
would silently settle (a flag given twice with other values) is an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.sglang_argv import TABLE, canonical_argv

ROOT = Path(__file__).resolve().parents[1]
CORPUS = [
    ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"],
    ["--model", "/m", "--speculative-algo", "EAGLE3", "--speculative-draft-model", "/d"],
    ["--model-path=/m", "--speculative-num-draft=4", "--speculative-eagle-top", "2"],
    ["--model-path", "/m", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1"],
    ["--model-path", "/m", "--speculative-num-steps", "3", "--speculative-num-steps", "3"],
    ["--model-path", "/m", "--no-enable-tf32-matmul", "--numa-node", "0", "1", "--dtype", "half"],
    ["--model-path", "/m", "--mem-fraction-static", "-1", "--trust-remote", "--enable-return-aux"],
]


@pytest.mark.parametrize(
    "argv,want",
    [
        (["--speculative-algo", "EAGLE3"], ["--speculative-algorithm", "EAGLE3"]),
        (["--speculative-draft-model=/d"], ["--speculative-draft-model-path=/d"]),
        (["--model", "/m"], ["--model-path", "/m"]),
        (["--no-enable-tf32-matmul"], ["--no-enable-tf32-matmul"]),  # negation kept as given
        (["--unknown-flag", "1"], ["--unknown-flag", "1"]),  # SGLang rejects it itself
    ],
)
def test_prefixes_and_aliases_get_their_canonical_names(argv, want):
    assert canonical_argv(argv) == want


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--speculative-num-steps", "3", "--speculative-num-steps", "5"],
         "--speculative-num-steps 3 and --speculative-num-steps 5 both set speculative_num_steps"),
        (["--speculative-draft-model-path", "/a", "--speculative-draft-model", "/b"],
         "both set speculative_draft_model_path"),
        (["--speculative-num"], "is ambiguous"),
        (["--config", "cfg.yaml"], "merges a config file into its flags at start"),
    ],
)  # fmt: skip
def test_what_sglang_would_settle_silently_is_an_error(argv, message):
    with pytest.raises(WiringError, match=message):
        canonical_argv(argv)


def test_the_launcher_refuses_a_repeated_flag_before_sglang(tmp_path):
    target = tmp_path / "t"
    target.mkdir()
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 16}
    (target / "config.json").write_text(json.dumps(cfg))
    steps = ["--speculative-num-steps", "3", "--speculative-num-steps", "5"]
    argv = [sys.executable, "-m", "sglang_eagle3.launch", "--dry-run", "--model-path",
            str(target), *steps]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "SGLang would take the last one" in proc.stderr


@pytest.mark.sglang
def test_table_is_sglangs_parser_and_the_corpus_parses_the_same():
    script = f"""
import argparse, json, sys
sys.path.insert(0, {str(ROOT / "tests" / "scripts")!r})
from sglang.srt.server_args import ServerArgs
from sglang_options import render
from sglang_eagle3.launch.sglang_argv import canonical_argv
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
same = [vars(parser.parse_args(a)) == vars(parser.parse_args(canonical_argv(a)))
        for a in {CORPUS!r}]
print(json.dumps({{"table": render(), "same": same}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["table"] == TABLE.read_text(encoding="utf-8"), "regenerate sglang_options.json"
    assert out["same"] == [True] * len(CORPUS)
