"""The launcher reads a command line as SGLang's own parser will: prefixes, aliases and
repeats resolve the same way, a `--config FILE` merges as SGLang's merger merges it (both
checked against SGLang's own code on a corpus), and what SGLang would silently settle (a flag
given twice with other values, a config file it ignores) is an error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.cli import main
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


# --config FILE: (the file's text, argv with {f} for its path); SGLang's merger must agree
SPEC_YAML = """speculative-algorithm: EAGLE3
speculative-num-steps: 3
speculative-eagle-topk: 1
speculative-num-draft-tokens: 4
"""
CONFIG_CORPUS = {
    "speculative flags": (SPEC_YAML, ["--model-path", "/m", "--config", "{f}"]),
    "the command line overrides": ("speculative-num-steps: 3\ntp-size: 2\ndtype: half\n",
        ["--config", "{f}", "--model-path", "/m", "--speculative-num-steps", "5",
         "--tensor-parallel-size", "1", "--dtype", "half"]),
    "store_true keys": ("trust-remote-code: true\nenable-metrics: false\nis_embedding: false\n"
        "skip-tokenizer-init: true\n", ["--model-path", "/m", "--config", "{f}"]),
    "the draft path": ("model: /m\nspeculative-draft-model: /d\nspeculative-algo: EAGLE3\n",
        ["--config", "{f}", "--model-path", "/n"]),
    "lists, numbers, a mapping": ("numa-node: [0, 1]\nlora-target-modules: []\n"
        "mem-fraction-static: -1\njson-model-override-args: {a: 1}\n",
        ["--model-path", "/m", "--config", "{f}"]),
    "an empty file": ("", ["--model-path", "/m", "--config", "{f}"]),
}  # fmt: skip
# (the file's text, or None: no file; argv; the message; SGLang: error, or runs without it)
CONFIG_REFUSED = {
    "missing file": (None, ["--config", "{f}"], "does not exist", "error"),
    "not a mapping": ("- a\n- b\n", ["--config", "{f}"], "holds a list, not a mapping", "error"),
    "bad YAML": ("a: [1\n", ["--config", "{f}"], "not valid YAML", "error"),
    "two files": ("", ["--config", "{f}", "--config", "{f}"], "given 2 times", "error"),
    "no file": ("", ["--model-path", "/m", "--config"], "no file after it", "error"),
    "unknown key": ("hidden-state-layout: embed\n", ["--config", "{f}"],
                    "'hidden-state-layout' is no option of SGLang's", "error"),
    "underscores": ("model-path: /m\nspeculative_num_steps: 3\n", ["--config", "{f}"],
                    "with dashes, speculative-num-steps", "error"),
    "a --x/--no-x switch": ("model-path: /m\nenable-tf32-matmul: true\n", ["--config", "{f}"],
                            "refuses --enable-tf32-matmul", "error"),
    "a prefix of a store_true": ("model-path: /m\ntrust-remote: true\n", ["--config", "{f}"],
                                 "--trust-remote-code takes no value", "error"),
    "a list for one value": ("model-path: [/a, /b]\n", ["--config", "{f}"],
                             "--model-path takes one value, the key gives 2", "error"),
    "nested config": ("model-path: /m\nconfig: other.yaml\n", ["--config", "{f}"],
                      "names another config file", "runs"),
    "--config=FILE": ("dtype: half\n", ["--model-path", "/m", "--config={f}"],
                      "only after a bare `--config`", "runs"),
    "two keys, one option": ("model: /a\nmodel-path: /b\n", ["--config", "{f}"],
                             "both set model_path", "runs"),
}  # fmt: skip


def config_case(tmp_path: Path, text: str | None, argv: list[str], name: str = "c.yaml"):
    f = tmp_path / name
    if text is not None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return [a.replace("{f}", str(f)) for a in argv]


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


# ---- --config FILE ------------------------------------------------------------------


def test_a_config_file_is_replaced_by_its_flags_and_the_command_line_wins(tmp_path):
    case = CONFIG_CORPUS["the command line overrides"]
    assert canonical_argv(config_case(tmp_path, *case)) == [
        "--model-path", "/m", "--speculative-num-steps", "5", "--tp-size", "1", "--dtype", "half",
    ]  # fmt: skip
    case = CONFIG_CORPUS["store_true keys"]  # true: the bare flag; false: nothing
    assert canonical_argv(config_case(tmp_path, *case)) == [
        "--trust-remote-code", "--skip-tokenizer-init", "--model-path", "/m",
    ]  # fmt: skip
    case = CONFIG_CORPUS["the draft path"]  # aliases and prefixes as keys, canonical out
    assert canonical_argv(config_case(tmp_path, *case)) == [
        "--speculative-draft-model-path", "/d", "--speculative-algorithm", "EAGLE3",
        "--model-path", "/n",
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONFIG_REFUSED))
def test_a_config_file_sglang_would_refuse_or_ignore_is_an_error(tmp_path, name):
    text, argv, message, _ = CONFIG_REFUSED[name]
    with pytest.raises(WiringError, match=re.escape(message)) as err:
        canonical_argv(config_case(tmp_path, text, argv))
    assert err.value.fix, "says how to fix it"
    if name not in ("two files", "no file", "--config=FILE"):
        assert err.value.path == str(tmp_path / "c.yaml")


def test_config_files_sglang_cannot_read_name_the_file(tmp_path):
    (tmp_path / "dir.yaml").mkdir()  # unreadable: a directory
    (tmp_path / "c.json").write_text("{}")
    for name, message in [("c.json", "*.yaml or *.yml, not .json"), ("dir.yaml", "cannot read")]:
        with pytest.raises(WiringError, match=re.escape(message)) as err:
            canonical_argv(config_case(tmp_path, None, ["--config", "{f}"], name))
        assert err.value.path == str(tmp_path / name) and err.value.fix


def launcher_case(tmp_path: Path) -> tuple[Path, Path]:
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 16,
    }).parent  # fmt: skip
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=16, ids=[-1, 2, 5]), fc_in=48)
    return target, draft


def test_the_launcher_validates_and_passes_on_the_merged_flags(tmp_path, capsys):
    target, draft = launcher_case(tmp_path)
    f = tmp_path / "serve.yaml"
    f.write_text(SPEC_YAML + f"speculative-draft-model: {draft}\nmodel-path: {target}\n")
    run = ["--config", str(f), "--speculative-num-steps", "5", "--dry-run", "--json",
           "--draft-cache-dir", str(tmp_path / "cache")]  # fmt: skip
    # the command line's 5 steps against the file's 4 draft tokens: checked together
    assert main(run) == 2 and "silently change 4 to 6" in capsys.readouterr().err
    code = main([*run, "--speculative-num-draft-tokens", "6"])
    out = capsys.readouterr()
    assert code == 0, out.err
    argv = json.loads(out.out)["sglang_argv"]
    assert "--config" not in argv and str(f) not in argv  # SGLang gets the merged flags
    assert argv.count("--speculative-num-steps") == 1
    assert argv[argv.index("--speculative-num-steps") + 1] == "5"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(draft)
    missing = tmp_path / "nope.yaml"
    code = main(["--config", str(missing), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(missing) in err and "Fix:" in err


@pytest.mark.sglang
def test_table_is_sglangs_parser_and_the_corpora_parse_the_same(tmp_path):
    configs = [config_case(tmp_path / f"c{k}", *v) for k, v in enumerate(CONFIG_CORPUS.values())]
    refused = [config_case(tmp_path / f"r{k}", t, a) for k, (t, a, *_) in
               enumerate(CONFIG_REFUSED.values())]  # fmt: skip
    script = f"""
import argparse, contextlib, io, json, sys
sys.path.insert(0, {str(ROOT / "tests" / "scripts")!r})
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
from sglang_options import render
from sglang_eagle3.launch.sglang_argv import _options, canonical_argv
from sglang_eagle3.launch.sglang_config_file import key_kinds
parser = argparse.ArgumentParser(); ServerArgs.add_cli_args(parser)
merger = ConfigArgumentMerger(parser)
def sglang(a):  # as prepare_server_args reads it; None: SGLang stops
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return vars(parser.parse_args(merger.merge_config_with_args(list(a))))
        except (Exception, SystemExit):
            return None
same = [vars(parser.parse_args(a)) == vars(parser.parse_args(canonical_argv(a)))
        for a in {CORPUS!r}]
merged = [sglang(a) == vars(parser.parse_args(canonical_argv(a))) for a in {configs!r}]
runs = ["error" if sglang(a) is None else "runs" for a in {refused!r}]
store_true, unsupported = key_kinds(tuple(dict.fromkeys(_options().values())))
kinds = [set(store_true) == set(merger.store_true_actions),
         set(unsupported) == set(merger.unsupported_actions)]
print(json.dumps({{"table": render(), "same": same, "merged": merged, "runs": runs,
                  "kinds": kinds}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["table"] == TABLE.read_text(encoding="utf-8"), "regenerate sglang_options.json"
    assert out["same"] == [True] * len(CORPUS)
    assert dict(zip(CONFIG_CORPUS, out["merged"], strict=True)) == dict.fromkeys(
        CONFIG_CORPUS, True
    )
    runs = {k: v[3] for k, v in CONFIG_REFUSED.items()}  # SGLang stops, or runs without the file
    assert dict(zip(CONFIG_REFUSED, out["runs"], strict=True)) == runs
    assert out["kinds"] == [True, True], "update CUSTOM_ACTIONS in sglang_config_file.py"
