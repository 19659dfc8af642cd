"""`python -m sglang_eagle3.demo`: the seed's bug and its fix, at toy scale, on this CPU.

Builds (or reuses) the tiny DeepSeek-V3 target and a drafter trained with speculators' own
model code on taps embed, layer:2, layer:5; then serves them, each speculative server timed
request by request against a plain server alive beside it, with the same greedy prompts:
  plain            no speculation (the baseline)
  stock-wiring     EAGLE-3 as stock SGLang 0.5.23 wires this drafter: it ignores the
                   speculators top-level ids and captures its default taps
  declared-layout  EAGLE-3 through `python -m sglang_eagle3.launch` (this plugin)
  declared-layout-mla  the same, with a tiny MLA drafter (Eagle3DeepseekV2ForCausalLM, as
                   TorchSpec trains for Kimi-K2.x), trained through the doctor's reference
                   forward on the same taps (--no-mla-row leaves it out)
The EAGLE-3 servers draft as the tuner picks at concurrency 1 for these models (the tune result
shipped in testing/tiny/tune_result.json, made by benchmarks/bench_live.py on 2 cores; checked
to be these models'); --steps/--topk/--draft-tokens override it.
The doctor's prediction replays the plain server's greedy outputs, drafted the same way,
for each drafter.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.bench.metrics import spec_stats
from sglang_eagle3.launch.server_process import sglang_server
from sglang_eagle3.table import markdown_table
from sglang_eagle3.tune.measure import greedy


def spec_flags(steps: int, topk: int, draft_tokens: int) -> list[str]:
    return ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens",
            str(draft_tokens)]  # fmt: skip


# One torch thread per server: on 2 cores the HTTP client, tokenizer and detokenizer need the
# other one, and tiny matrices gain nothing from a second OpenMP thread.
SERVER_ENV = {"OMP_NUM_THREADS": "1"}
WARMUP = ("import collections\n\n\ndef main():\n", "class Config:\n    def __init__(self):")
STOCK_ONLY = {env_names.PLUGINS: "sglang_eagle3_cpu_harness"}  # the CPU harness, not our plugin
TUNE_RESULT = Path(__file__).resolve().parent / "tiny" / "tune_result.json"


# Per server in --json; output_ids let a caller compare other servers with these (the tests'
# TP=2 run does).
JSON_ROW_KEYS = ("name", "accept_length", "tok_s", "lossless", "speedup", "stats", "output_ids")


def prompts(n: int, chars: int = 160) -> list[str]:
    """Openings of held-out standard-library files (never seen in training)."""
    from sglang_eagle3.testing.tiny.corpus import stdlib_files

    out = []
    for f in stdlib_files("heldout"):
        text = f.path.read_text(errors="replace").strip()
        if len(text) >= chars:
            out.append(text[:chars])
        if len(out) == n:
            break
    return out


def stock_flat_copy(draft_dir: Path, target_dir: Path, out: Path) -> Path:
    """What a team gets by flattening the speculators config by hand for stock SGLang: the
    ids stay top-level (SGLang reads only eagle_config's), nothing declares the layout."""
    from sglang_eagle3.checkpoint.flat_draft import flat_copy_for_target

    flat_copy_for_target(draft_dir, target_dir, out)
    cfg = json.loads((out / "config.json").read_text())
    eagle = cfg.pop("eagle_config", {})
    cfg["eagle_aux_hidden_state_layer_ids"] = eagle.get("eagle_aux_hidden_state_layer_ids")
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def start(name, target, extra, log_dir, *, module, env=None):
    """A started, warmed-up server (first requests compile SGLang's torch.compile'd ops)."""
    env = {**SERVER_ENV, **(env or {})}
    srv = sglang_server(target, extra, log_dir / f"{name}.log", module=module, env=env)
    srv.start()
    try:
        srv.wait_ready(timeout=600)
        params = greedy(8)
        for text in WARMUP:
            srv.post("/generate", {"text": text, "sampling_params": params})
    except BaseException:
        srv.stop()
        raise
    return srv


def _timed(srv, ids: list[int], max_new: int) -> tuple[dict, float]:
    params = greedy(max_new)
    t0 = time.perf_counter()
    out = srv.post("/generate", {"input_ids": ids, "sampling_params": params})
    return out, time.perf_counter() - t0


def measure(name, target, extra, log_dir, texts, max_new, *, module, plain, env=None) -> dict:
    """The server ``name`` against ``plain`` (a started server alive beside it), request by
    request, plain first every other request: the machine's drift hits both alike. Its
    speedup is plain's time over its own on the same requests. ``name`` "plain": ``plain``
    itself, alone."""
    paired = name != "plain"
    srv = start(name, target, extra, log_dir, module=module, env=env) if paired else plain
    try:
        outs, mine, ref = [], 0.0, 0.0
        for i, ids in enumerate(texts):  # token ids: the doctor replays exactly these
            plain_first = paired and i % 2 == 1
            if plain_first:
                ref += _timed(plain, ids, max_new)[1]
            out, t = _timed(srv, ids, max_new)
            outs.append(out)
            mine += t
            if paired and not plain_first:
                ref += _timed(plain, ids, max_new)[1]
            print(f"\r  {name}: {i + 1}/{len(texts)} requests", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        if paired:
            srv.stop()
    stats = spec_stats(o["meta_info"] for o in outs)
    return {
        "name": name,
        "tok_s": stats.completion_tokens / mine,
        "wall_s": mine,
        "speedup": ref / mine if paired else 1.0,
        "accept_length": stats.accept_length,
        "stats": stats.to_json(),
        "output_ids": [o["output_ids"] for o in outs],
    }


def tuner_pick(concurrency: int = 1) -> tuple[tuple[int, int, int], str]:
    """The tuner's fastest setting at ``concurrency`` for the tiny target and drafter, from the
    tune result shipped beside them (made by benchmarks/bench_live.py's tuner run on 2 cores),
    checked to be theirs; and where it comes from."""
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter
    from sglang_eagle3.tune.saved import load

    d = tiny_drafter()
    result = load(TUNE_RESULT, d.target_dir, d.draft_dir)
    best = result["per_concurrency"][str(concurrency)]["best"]
    spec = (best["steps"], best["topk"], best["draft_tokens"])
    return spec, f"the tuner's pick at concurrency {concurrency} ({TUNE_RESULT.name})"


def doctor_prediction(draft: Path, target: Path, spec: tuple[int, int, int], data: Path) -> dict:
    """The doctor on ``data`` (the target's hidden states over what the plain server
    generated): its replay accept length walks the sequences the servers verified."""
    import subprocess

    argv = [sys.executable, "-m", "sglang_eagle3.doctor", "--draft", str(draft),
            "--data", str(data), "--target", str(target), "--json", "--no-progress",
            "--steps", str(spec[0]), "--topk", str(spec[1]), "--draft-tokens",
            str(spec[2])]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    try:
        report = json.loads(proc.stdout)
        return {
            "replay": report["replay_accept_length"],
            "chain": report["predicted_accept_length"],
        }
    except (json.JSONDecodeError, KeyError):
        print(f"doctor failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
        return {"replay": None, "chain": None}


def tokenize(target: Path, texts: list[str]) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    return [tok.encode(t, add_special_tokens=True).ids for t in texts]


def run(
    n_prompts: int,
    max_new: int,
    work: Path,
    norm_fix_off_row: bool = False,
    spec: tuple[int, int, int] | None = None,
    mla_row: bool = True,
) -> dict:
    from sglang_eagle3.testing.tiny.drafter import tiny_drafter

    drafter = tiny_drafter()
    spec, spec_source = (spec, "given") if spec is not None else tuner_pick(1)
    target = drafter.target_dir
    texts = tokenize(target, prompts(n_prompts))
    stock = stock_flat_copy(drafter.draft_dir, target, work / "stock-draft")
    cpu = ["--dtype", "float32"]
    flags = spec_flags(*spec)
    ours = "sglang_eagle3.launch"
    # (name, SGLang flags, module, env): each timed against the plain server alive beside it
    servers = [
        ("stock-wiring", [*cpu, *flags, "--speculative-draft-model-path", str(stock)],
         "sglang.launch_server", STOCK_ONLY),
        ("declared-layout", ["--cpu", *cpu, *flags, "--speculative-draft-model-path",
                             str(drafter.draft_dir), "--draft-cache-dir", str(work / "drafts")],
         ours, None),
    ]  # fmt: skip
    if norm_fix_off_row:  # the same wiring without the plugin's norm_before_residual fix
        servers.append(("declared-layout-no-norm-fix", ["--cpu", *cpu, *flags,
                        "--speculative-draft-model-path", str(drafter.draft_dir),
                        "--draft-cache-dir", str(work / "drafts")], ours,
                        {env_names.NORM_BEFORE_RESIDUAL: "0"}))  # fmt: skip
    if mla_row:
        from sglang_eagle3.testing.tiny.mla_drafter import tiny_mla_drafter

        mla = tiny_mla_drafter()
        servers.append(("declared-layout-mla", ["--cpu", *cpu, *flags,
                        "--speculative-draft-model-path", str(mla)], ours, None))  # fmt: skip
    ref = start("plain", target, ["--cpu", *cpu], work, module=ours)
    try:
        rows = [measure("plain", target, [], work, texts, max_new, module=ours, plain=ref)]
        for name, extra, module, env in servers:
            rows.append(measure(name, target, extra, work, texts, max_new, module=module,
                                plain=ref, env=env))  # fmt: skip
    finally:
        ref.stop()
    plain = rows[0]
    for row in rows:
        row["lossless"] = row["output_ids"] == plain["output_ids"]
    from sglang_eagle3.testing.tiny.replay_data import write_replay_data

    data = write_replay_data(target, texts, plain["output_ids"], work / "replay-data")
    doctor = doctor_prediction(drafter.draft_dir, target, spec, data)
    mla_doctor = doctor_prediction(mla, target, spec, data) if mla_row else {"replay": None}
    return {
        "rows": rows,
        "predicted_accept_length": doctor["replay"],
        "doctor_chain_accept_length": doctor["chain"],
        "mla_predicted_accept_length": mla_doctor["replay"],
        "prompts": len(texts),
        "prompt_ids": texts,
        "max_new_tokens": max_new,
        "speculative": dict(
            zip(("num_steps", "eagle_topk", "num_draft_tokens"), spec, strict=True)
        ),
        "speculative_source": spec_source,
    }


def table(result: dict) -> str:
    header = ("server", "accept length", "tok/s", "speedup vs plain (paired)", "lossless")
    rows = [
        [r["name"], "-" if r["accept_length"] is None else f"{r['accept_length']:.2f}",
         f"{r['tok_s']:.1f}", f"{r['speedup']:.2f}x", "yes" if r["lossless"] else "NO"]
        for r in result["rows"]
    ]  # fmt: skip
    lines = [markdown_table(header, rows)]
    pred, sp = result["predicted_accept_length"], result["speculative"]
    shape = f"{sp['num_steps']} steps, topk {sp['eagle_topk']}, {sp['num_draft_tokens']} tokens"
    lines.append(f"\nspeculative servers: {shape} ({result['speculative_source']}); each timed "
                 "request by request against the plain server alive beside it")  # fmt: skip
    lines.append(
        "\ndoctor's predicted accept length (declared layout; replaying the plain server's "
        f"greedy outputs drafted as the servers do: {shape}): "
        f"{'-' if pred is None else f'{pred:.2f}'}"
    )
    chain = result.get("doctor_chain_accept_length")
    if chain is not None:
        lines.append(f"the chain formula 1 + p1 + p1*p2 + ... on the same sequences: {chain:.2f}")
    served = {r["name"]: r["accept_length"] for r in result["rows"]}
    declared, stock = served.get("declared-layout"), served.get("stock-wiring")
    if declared and pred:
        lines.append(f"served vs predicted: {100 * (declared / pred - 1):+.1f} %")
    if declared and stock:
        lines.append(f"declared layout's accept length / stock wiring's: {declared / stock:.2f}x")
    mla, mla_pred = served.get("declared-layout-mla"), result.get("mla_predicted_accept_length")
    if mla and mla_pred:
        lines.append(
            f"MLA drafter: served {mla:.2f}, doctor's replay {mla_pred:.2f} "
            f"({100 * (mla / mla_pred - 1):+.1f} %)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sglang_eagle3.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", type=Path, help="write the results as JSON here")
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument(
        "--norm-fix-off-row",
        action="store_true",
        help="add a 4th server: the declared layout without honouring norm_before_residual",
    )
    p.add_argument(
        "--mla-row",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve the tiny MLA drafter too (Eagle3DeepseekV2ForCausalLM; default: yes)",
    )
    p.add_argument("--steps", type=int, help="--speculative-num-steps (default: the tuner's "
                   "pick at concurrency 1, from the tune result shipped with the tiny "
                   "models)")  # fmt: skip
    p.add_argument("--topk", type=int, help="--speculative-eagle-topk (with --steps; default 2)")
    p.add_argument(
        "--draft-tokens",
        type=int,
        help="--speculative-num-draft-tokens (default: steps + 1 for a chain, 2 x steps else)",
    )
    args = p.parse_args(argv)
    spec = None
    if args.steps is not None:
        topk = args.topk or 2
        default_tokens = args.steps + 1 if topk == 1 else 2 * args.steps
        spec = (args.steps, topk, args.draft_tokens or default_tokens)
    elif args.topk is not None or args.draft_tokens is not None:
        p.error("--topk and --draft-tokens go with --steps")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-demo-") as work:
        result = run(
            args.prompts,
            args.max_new_tokens,
            Path(work),
            args.norm_fix_off_row,
            spec=spec,
            mla_row=args.mla_row,
        )
    print(table(result))
    minutes, seconds = divmod(round(time.monotonic() - start), 60)
    print(f"demo wall time: {minutes} min {seconds} s")
    if args.json:
        slim = {
            "rows": [{k: r[k] for k in JSON_ROW_KEYS} for r in result["rows"]],
            "prompt_ids": result["prompt_ids"],
            "max_new_tokens": result["max_new_tokens"],
            "predicted_accept_length": result["predicted_accept_length"],
            "doctor_chain_accept_length": result["doctor_chain_accept_length"],
            "mla_predicted_accept_length": result["mla_predicted_accept_length"],
            "speculative": result["speculative"],
            "speculative_source": result["speculative_source"],
        }
        args.json.write_text(json.dumps(slim, indent=2))
    return 0 if all(r["lossless"] for r in result["rows"]) else 1
