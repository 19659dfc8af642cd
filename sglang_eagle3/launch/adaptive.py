"""Refuse before start an adaptive launch that SGLang 0.5.23 would refuse or silently change.

``--speculative-adaptive`` moves ``--speculative-num-steps`` at run time among per-batch-size
candidate steps (``srt/speculative/adaptive_spec_params.py``). Where adaptive cannot run SGLang
only warns and serves static params (``adaptive_unsupported_reason`` L56-100, from
``arg_groups/speculative_hook.py`` L1374-1389); it raises on steps outside the candidates and
overwrites draft tokens with steps + 1 (L1392-1427); it ignores unknown config keys and a config
without the flag, and takes tuning values ``AdaptiveStepSlot`` (L166-176) misuses. Pure Python.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_get, argv_has, argv_int
from sglang_eagle3.launch.spec_flags import (
    ADAPTIVE,
    ADAPTIVE_CONFIG,
    DRAFT,
    MAX_RUNNING,
    MAX_RUNNING_NOTE,
    STEPS,
    TOPK,
    FlagChange,
    Resolution,
    SpecFlags,
)

# SGLang 0.5.23 srt/speculative/adaptive_spec_params.py L28-53, used when no config file is
# given; tests/test_launch_adaptive.py keeps this copy equal to the installed one.
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}  # fmt: skip
DEFAULT_SOURCE = "SGLang 0.5.23's default adaptive config"
EXAMPLE = '{"1": {"candidate_steps": [1, 3, 5]}, "8": {"candidate_steps": [0, 1]}}'
_show = json.dumps  # values in messages as the file spells them (true, not True)


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # JSON true is no step count


def _number(v: object) -> bool:  # NaN and Infinity parse as JSON floats
    return _int(v) or (isinstance(v, float) and math.isfinite(v))


# AdaptiveStepSlot reads these from {**top level, **slot} unchecked: ema_alpha 0 freezes the
# EMA and above 1 overshoots it, update_interval 0 divides by zero mid-serving, an infinite
# ceiling_coeff overflows math.ceil, a string raises on first use.
TUNING = {
    "ema_alpha": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "update_interval": (lambda v: _int(v) and v >= 1, "a whole number >= 1"),
    "warmup_batches": (lambda v: _int(v) and v >= 0, "a whole number >= 0"),
    "down_hysteresis": (_number, "a finite number"),
    "up_hysteresis": (_number, "a finite number"),
    "ceiling_coeff": (lambda v: _number(v) and v >= 0, "a finite number >= 0"),
}
SLOT_KEYS = ("candidate_steps", *TUNING)


@dataclass(frozen=True)
class AdaptiveConfig:
    """A checked adaptive config: each slot's smallest batch size and its candidate steps."""

    path: str | None  # None: DEFAULT_ADAPTIVE_CONFIG
    slots: tuple[tuple[int, tuple[int, ...]], ...]
    candidates: tuple[int, ...]  # the union: SGLang refuses steps and sizes buffers by it

    @property
    def start(self) -> int:
        """SGLang's steps when --speculative-num-steps is unset (speculative_hook.py L1413)."""
        return self.candidates[len(self.candidates) // 2]

    def to_json(self) -> dict:
        return {"config": self.path, "candidate_steps": list(self.candidates),
                "slots": {str(bs): list(steps) for bs, steps in self.slots}}  # fmt: skip


def _unknown(key: str, known: tuple[str, ...], where: str, path: str) -> WiringError:
    close = difflib.get_close_matches(key, known, n=1)
    top = not where.startswith("slot")
    if top and key.strip().isascii() and key.strip().isdigit():
        fix = f'write the batch size as "{key.strip()}" (ASCII digits only)'
    elif top and key == "candidate_steps":
        fix = f"put candidate_steps inside a batch-size slot, e.g. {EXAMPLE}"
    else:
        fix = f"did you mean {close[0]}?" if close else "remove it"
    listing = ", ".join((('batch sizes such as "1"',) if top else ()) + known)
    return WiringError(f"{where}unknown key {_show(key)}, which SGLang 0.5.23 would ignore "
                       f"silently (known: {listing})", path=path, fix=fix)  # fmt: skip


def _check_tuning(entry: dict, where: str, path: str) -> None:
    for field, (ok, must) in TUNING.items():
        if field in entry and not ok(entry[field]):
            raise WiringError(f"{where}{field} must be {must}, got {_show(entry[field])}",
                              path=path, fix=f"set {field} to {must}, or drop it")  # fmt: skip


def _read(path: str) -> object:
    def unique(pairs: list) -> dict:  # json keeps the last of two equal keys without a word
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise WiringError(f"key {_show(twice[0])} is given twice; JSON keeps the last",
                              path=path, fix="give each key once")  # fmt: skip
        return dict(pairs)

    fix = f"pass a JSON file such as {EXAMPLE}, or drop {ADAPTIVE_CONFIG} (SGLang's default)"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise WiringError(f"cannot read the adaptive config: {why}", path=path, fix=fix) from None
    try:
        return json.loads(text, object_pairs_hook=unique)
    except WiringError:
        raise
    except (ValueError, RecursionError) as err:  # ValueError: also ints past 4300 digits
        raise WiringError(f"the adaptive config is not JSON: {err}", path=path, fix=fix) from None


def check_adaptive_config(path: str | Path | None) -> AdaptiveConfig:
    """``path`` (None: SGLang's default) read with SGLang's rules (``_load_adaptive_config``: a
    JSON object, a slot per digit-string key, each a non-empty list of steps >= 0), plus what
    SGLang would only misuse: unknown keys, bools as steps, two slots for one batch size, bad
    tuning values. WiringError naming the file, the slot and the field."""
    where = DEFAULT_SOURCE if path is None else str(path)
    cfg = DEFAULT_ADAPTIVE_CONFIG if path is None else _read(str(path))
    if not isinstance(cfg, dict):
        raise WiringError(f"the adaptive config must be a JSON object, got {type(cfg).__name__}",
                          path=where, fix=f"write it as {EXAMPLE}")  # fmt: skip
    _check_tuning(cfg, "top level: ", where)  # every slot inherits these ({**cfg, **entry})
    slots: dict[int, tuple[int, ...]] = {}
    for key, entry in cfg.items():
        if key in TUNING:
            continue
        if key.isdigit() and not key.isascii():  # int() reads "١" as 1 and stops on "²"
            raise WiringError(f"top level: batch size {_show(key)} is not in ASCII digits, which "
                              "SGLang 0.5.23 misreads or stops on", path=where,
                              fix="write batch sizes with the digits 0-9")  # fmt: skip
        if not key.isdigit():  # "1 ", "candidate_step": SGLang skips them without a word
            raise _unknown(key, tuple(TUNING), "top level: ", where)
        slot = f"slot {_show(key)}: "
        if not isinstance(entry, dict):
            raise WiringError(f"{slot}must be a JSON object, got {_show(entry)}", path=where,
                              fix='write it as {"candidate_steps": [1, 3]}')  # fmt: skip
        for field in entry:
            if field not in SLOT_KEYS:
                raise _unknown(field, SLOT_KEYS, slot, where)
        steps = entry.get("candidate_steps")
        if not (isinstance(steps, list) and steps and all(_int(s) and s >= 0 for s in steps)):
            got = _show(steps) if "candidate_steps" in entry else "nothing"
            raise WiringError(f"{slot}candidate_steps must be a non-empty list of whole "
                              f"numbers >= 0, got {got}", path=where, fix="list the steps this "
                              "batch size may use, e.g. [0, 1, 3]")  # fmt: skip
        _check_tuning(entry, slot, where)
        if int(key) in slots:  # "8" and "08": SGLang keeps one of them without a word
            raise WiringError(f"{slot}batch size {int(key)} has two slots", path=where,
                              fix="merge them into one")  # fmt: skip
        slots[int(key)] = tuple(sorted(set(steps)))
    if not slots:
        raise WiringError("the adaptive config has no batch-size slot (a digit-string key)",
                          path=where, fix=f"write it as {EXAMPLE}")  # fmt: skip
    union = tuple(sorted({s for steps in slots.values() for s in steps}))
    return AdaptiveConfig(None if path is None else str(path), tuple(sorted(slots.items())), union)


def _fallbacks(argv: list[str]) -> list[tuple[str, str]]:
    """(what, way out) for each setting that makes SGLang turn adaptive off (L56-100)."""
    found, topk = [], argv_int(argv, TOPK)
    if topk is not None and topk != 1:
        found.append((f"{TOPK} {topk} (adaptive runs a chain, topk 1)", f"{TOPK} 1 or unset"))
    # attn_dp_enabled_of: attn_dp_size > 1 (the deprecated --enable-dp-attention turns
    # --dp-size into it, parallel_hook.py L39-61) or a scale-up elastic EP joiner
    attn_dp, dp = argv_int(argv, "--attn-dp-size") or 1, argv_int(argv, "--dp-size") or 1
    if attn_dp > 1:
        found.append((f"attention DP (--attn-dp-size {attn_dp})", "--attn-dp-size 1"))
    elif argv_has(argv, "--enable-dp-attention") and dp > 1:
        found.append((f"attention DP (--enable-dp-attention --dp-size {dp})",
                      "no --enable-dp-attention"))  # fmt: skip
    if argv_get(argv, "--elastic-ep-join-mode") == "scale":
        found.append(("attention DP (--elastic-ep-join-mode scale)", "another join mode"))
    for flag in ("--enable-multi-layer-eagle", "--enable-two-batch-overlap", "--enable-pdmux"):
        if argv_has(argv, flag):
            found.append((flag, f"no {flag}"))
    return found


def resolve_adaptive_argv(argv: list[str]) -> Resolution:
    """The three speculative flags of an adaptive SGLang command line as SGLang 0.5.23 starts
    them (topk 1, steps in the candidates, draft tokens steps + 1), or a WiringError."""
    cfg_path = argv_get(argv, ADAPTIVE_CONFIG)
    if not argv_has(argv, ADAPTIVE):  # spec_info.py L277, model_runner.py L911: read only then
        raise WiringError(f"{ADAPTIVE_CONFIG} {cfg_path or ''} without {ADAPTIVE}: SGLang "
                          "0.5.23 reads the file only in adaptive mode, so it would serve static "
                          "steps and ignore it", path="command line",
                          fix=f"add {ADAPTIVE}, or drop {ADAPTIVE_CONFIG}")  # fmt: skip
    if argv_has(argv, ADAPTIVE_CONFIG) and not cfg_path:
        raise WiringError(f"{ADAPTIVE_CONFIG} names no file", path="command line",
                          fix=f"{ADAPTIVE_CONFIG} FILE.json")  # fmt: skip
    config = check_adaptive_config(cfg_path)
    off = _fallbacks(argv)
    if off:
        raise WiringError(f"{ADAPTIVE} with {'; '.join(what for what, _ in off)}: SGLang 0.5.23 "
                          "would turn adaptive off with only a warning and serve static "
                          "speculative params", path="command line",
                          fix="; ".join(f for _, f in off) + f"; or drop {ADAPTIVE}")  # fmt: skip
    cands, source = list(config.candidates), config.path or DEFAULT_SOURCE
    steps, topk, drafts = (argv_int(argv, flag) for flag in (STEPS, TOPK, DRAFT))
    if steps is not None and steps not in cands:
        raise WiringError(f"{STEPS} {steps} is not one of the adaptive candidate steps {cands} "
                          f"(from {source}): SGLang 0.5.23 refuses it at start",
                          path="command line", fix=f"{STEPS} one of {cands}, or unset (SGLang "
                          f"starts at {config.start}), or add {steps} to a slot's "
                          "candidate_steps")  # fmt: skip
    s = config.start if steps is None else steps
    if drafts is not None and drafts != s + 1:
        said = f"{STEPS} {s}" + (" (derived)" if steps is None else "")
        raise WiringError(f"{DRAFT} {drafts} with {ADAPTIVE} and {said}: SGLang 0.5.23 sets it "
                          f"to steps + 1 = {s + 1} at start and at every switch, and would "
                          "silently serve that", path="command line",
                          fix=f"{DRAFT} {s + 1}, or unset")  # fmt: skip
    derived = [
        (STEPS, steps, s, f"SGLang 0.5.23's adaptive start, the middle of the candidates {cands}"),
        (TOPK, topk, 1, "adaptive mode runs a chain (topk 1) only"),
        (DRAFT, drafts, s + 1, f"adaptive mode keeps it at {STEPS} + 1"),
    ]
    changes = tuple(FlagChange(f, None, to, f"not given; {why}")
                    for f, given, to, why in derived if given is None)  # fmt: skip
    slots = "; ".join(f"from batch size {bs}: {list(c)}" for bs, c in config.slots)
    notes = [f"adaptive: SGLang moves {STEPS} at run time among {cands} ({slots}; from "
             f"{source}), {DRAFT} = steps + 1; the flags above are where it starts"]  # fmt: skip
    if cands == [0]:
        notes.append("every adaptive slot holds only steps 0: SGLang never drafts with it")
    if argv_int(argv, MAX_RUNNING) is None:
        notes.append(MAX_RUNNING_NOTE)
    return Resolution(SpecFlags(s, 1, s + 1, adaptive=True), changes, tuple(notes), config)
