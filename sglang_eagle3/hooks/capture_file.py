"""Capture to files: the scheduler writes a capture request's taps into one safetensors file,
and the HTTP answer carries only the file's name.

Stock SGLang 0.5.23 returns hidden states as nested Python lists (pickled from the scheduler to
the detokenizer and the tokenizer, then JSON): about 4.8 times the raw bytes per token.

On a capture-only server started with ``SGLANG_EAGLE3_CAPTURE_DIR=DIR`` (the capture command
sets it), a request whose ``rid`` starts with ``RID_PREFIX`` (hooks/capture_names.py) and asks
``return_hidden_states`` keeps its prefill rows as tensors on the request, chunk by chunk.
After the last chunk the scheduler writes ``DIR/<rid>.safetensors`` in speculators 0.9's sample
format (``hidden_states [seq, taps, hidden]`` in the declared order, ``token_ids [seq]``)
through a temporary file and a rename, and the request's hidden states become one small
record: ``{"file", "tokens", "bytes"}`` (or ``{"error"}``). Rank 0 of each attention-TP group
writes (with DP attention, each group serves its own requests); every other request is left
to stock SGLang.

The verifier tap, the last layer's output before the final norm (what speculators trains its
targets from), lies outside most families' capture loop. On such a server the final norm's
own capture callback (``residual_batch.final_norm``, which 67 model files call) keeps it, and
the logits processor receives it as one more aux block, after the declared taps.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3 import __version__, env_names
from sglang_eagle3.checkpoint.target_config import read_target_config
from sglang_eagle3.data.manifest import MANIFEST_KEY, config_sha256
from sglang_eagle3.hooks.capture import process_plan
from sglang_eagle3.hooks.capture_names import RID_RE
from sglang_eagle3.log import get_logger

logger = get_logger()

PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor."
PREFILL = PROCESSOR + "SchedulerBatchResultProcessor._append_prefill_hidden_states"
DECODE = PROCESSOR + "SchedulerBatchResultProcessor._append_decode_hidden_states"
FINAL_NORM = "sglang.srt.layers.layer_boundary.residual.batch.final_norm"
LOGITS = "sglang.srt.layers.logits_processor.LogitsProcessor.forward"
_FORWARD = threading.local()  # the verifier tap of the forward in flight on this thread
ROWS = "_sglang_eagle3_capture_rows"  # the request's prefill chunks so far, as tensors
RADIX_FIX = "start the capture server with --disable-radix-cache"


def capture_dir() -> Path | None:
    value = os.environ.get(env_names.CAPTURE_DIR)
    return Path(value) if value else None


def _is_capture(req) -> bool:
    rid = getattr(req, "rid", None)
    return (
        req.return_hidden_states is True
        and isinstance(rid, str)
        and RID_RE.fullmatch(rid) is not None
        and capture_dir() is not None
    )


def verifier_tap(num_layers: int) -> str:
    return f"layer:{num_layers - 1}"


def final_norm(original, *args, **kwargs):
    """AROUND the stack's final norm: keep the residual stream it normalizes (pre-norm)."""
    theirs = args[3] if len(args) > 3 else kwargs.get("capture")

    def keep(residual):  # borrowed storage: the norm may reuse it
        _FORWARD.verifier = residual.clone()
        if theirs is not None:
            theirs(residual)

    if len(args) > 3:
        args = (*args[:3], keep, *args[4:])
    else:
        kwargs["capture"] = keep
    return original(*args, **kwargs)


def logits_forward(original, *args, **kwargs):
    """AROUND the logits processor: the verifier tap joins the aux blocks, last."""
    verifier = getattr(_FORWARD, "verifier", None)
    _FORWARD.verifier = None
    aux = args[5] if len(args) > 5 else kwargs.get("aux_hidden_states")
    if verifier is None or aux is None:
        return original(*args, **kwargs)
    import torch

    aux = torch.cat([aux, verifier], dim=-1) if torch.is_tensor(aux) else [*aux, verifier]
    if len(args) > 5:
        args = (*args[:5], aux, *args[6:])
    else:
        kwargs["aux_hidden_states"] = aux
    return original(*args, **kwargs)


@functools.cache
def _target() -> tuple[dict, dict]:
    """(config.json, its text part) of the served target: fixed for the process's life."""
    from sglang.srt.runtime_context import get_server_args

    cfg = read_target_config(get_server_args().model_path, ints=())[0]
    return cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def _file_meta(declared: list[str], dtype: str, tokens: int) -> dict[str, str]:
    """Each file's manifest (the sidecar's, without the set's counts): verifier stored last."""
    from sglang_eagle3.hooks.plugin import installed_sglang_version

    cfg, text = _target()
    n = int(text["num_hidden_layers"])
    taps = [*declared, verifier_tap(n)]
    manifest = {
        "version": 1, "fc_taps": declared, "verifier": taps[-1],
        "target": {"architecture": cfg["architectures"][0], "num_layers": n,
                   "hidden_size": int(text["hidden_size"]), "config_sha256": config_sha256(cfg)},
        "sglang": installed_sglang_version(), "sglang_eagle3": __version__, "dtype": dtype,
        "samples": None, "tokens": tokens,
    }  # fmt: skip
    return {"sglang_eagle3": json.dumps({"taps": taps, "num_layers": n, MANIFEST_KEY: manifest})}


def _write(req, rows) -> dict:
    """Write the request's taps (rows [seq, taps * hidden], SGLang's fill order); its record."""
    import torch
    from safetensors.torch import save_file

    plan = process_plan()
    ids = list(req.origin_input_ids)
    if plan is None:
        return {"error": "this server captures no declared layout"}
    if rows.shape[0] != len(ids):
        # a radix-cache hit skips the cached prefix: its rows are never computed
        return {"error": f"captured {rows.shape[0]} rows for a prompt of {len(ids)} tokens: "
                         f"{RADIX_FIX}"}  # fmt: skip
    k = len(plan.taps) + 1  # the declared taps in fill order, then the verifier
    if rows.shape[1] != k * int(_target()[1]["hidden_size"]):
        return {"error": f"{rows.shape[1]} columns captured, not {k} taps' worth: this family's "
                         "final norm does not pass through residual_batch.final_norm, so the "
                         "verifier tap cannot be kept"}  # fmt: skip
    blocks = rows.view(rows.shape[0], k, rows.shape[1] // k)
    hidden = blocks[:, [*plan.fc_block_order, k - 1]].contiguous()  # declared order, verifier
    dtype = str(hidden.dtype).removeprefix("torch.")
    out = capture_dir() / f"{req.rid}.safetensors"
    tmp = out.with_name(f".{out.name}.tmp")
    tensors = {"hidden_states": hidden, "token_ids": torch.tensor(ids, dtype=torch.long)}
    save_file(tensors, str(tmp), metadata=_file_meta(list(plan.taps), dtype, len(ids)))
    fd = os.open(tmp, os.O_RDONLY)
    try:  # a rename is atomic, but only durable once the bytes are
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, out)
    return {"file": out.name, "tokens": len(ids), "bytes": out.stat().st_size}


def append_prefill_hidden_states(original, *args, **kwargs):
    """AROUND the prefill's per-request hidden-state append: capture requests keep tensors."""
    req, mode = kwargs["req"], kwargs["capture_hidden_mode"]
    if not mode.is_full() or not _is_capture(req):
        return original(*args, **kwargs)
    from sglang.srt.runtime_context import get_parallel

    start = kwargs["hidden_state_offset"]
    end = start + kwargs["extend_input_len"]
    middle = req.inflight_middle_chunks > 0 and not req.finished() and not req.is_retracted
    if not kwargs.get("store", True) and not middle:  # aborted or retracted: nothing to write
        setattr(req, ROWS, [])
        return end
    rows = getattr(req, ROWS, None) or []
    rows.append(kwargs["logits_output"].hidden_states[start:end].to("cpu", copy=True))
    setattr(req, ROWS, rows)
    if middle:
        return end
    setattr(req, ROWS, [])
    if get_parallel().attn_tp_rank != 0:  # one writer per group; it alone answers
        return end
    import torch

    try:
        record = _write(req, torch.cat(rows))
    except OSError as err:  # a full disk fails this request, not the server
        record = {"error": f"cannot write {capture_dir()}: {err}"}
    if "error" in record:
        logger.error("capture %s: %s", req.rid, record["error"])
    req.hidden_states[:] = [record]
    return end


def append_decode_hidden_states(original, *args, **kwargs):
    """A capture request's file holds its prompt; decode rows would follow its record."""
    if _is_capture(kwargs["req"]):
        return None
    return original(*args, **kwargs)


HOOKS = [
    (FINAL_NORM, final_norm, HookType.AROUND),
    (LOGITS, logits_forward, HookType.AROUND),
    (PREFILL, append_prefill_hidden_states, HookType.AROUND),
    (DECODE, append_decode_hidden_states, HookType.AROUND),
]
