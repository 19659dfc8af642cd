"""The doctor without training data: the evidence is captured from the target itself.

The taps captured are the union of the candidates' taps (``data_free.needed_taps``), so a
Kimi-class target over HTTP moves ``hidden x taps x 4`` bytes of JSON floats per token for
the few taps the candidates name, not for every layer.
"""

from __future__ import annotations

from pathlib import Path

from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.data.prompts import read_prompts_checked
from sglang_eagle3.doctor.candidates import build_candidates, draft_layouts, eagle_config_ids
from sglang_eagle3.doctor.data_free import needed_taps, plausible_layouts, search_range
from sglang_eagle3.doctor.options import DoctorOptions
from sglang_eagle3.doctor.prompts import BUILT_IN
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.taps import format_taps


def _prompts(opts: DoctorOptions) -> list[str]:
    if opts.prompt_texts is not None:
        return list(opts.prompt_texts)
    if opts.prompts is None:
        return list(BUILT_IN)
    return read_prompts_checked(opts.prompts)


def _prompts_name(opts: DoctorOptions) -> str:
    if opts.prompt_texts is not None:
        return "the caller's prompts"
    return opts.prompts or "built-in set"


def captured_evidence(opts: DoctorOptions):
    from sglang_eagle3.doctor.run import Evidence, _num_layers, target_family
    from sglang_eagle3.doctor.target import target_config

    prompts = _prompts(opts)  # a bad prompts file fails before any model is loaded
    client = state = None
    if opts.server is not None:
        from sglang_eagle3.doctor.server_capture import ServerClient, server_capture_state

        client = ServerClient(opts.server, timeout=opts.request_timeout)
        state = server_capture_state(client)
        num_layers, hidden = int(state["num_layers"]), int(state["hidden_size"])
        family = _server_family(state)
        if opts.target is not None:
            cfg = target_config(opts.target)
            if (cfg["num_hidden_layers"], cfg["hidden_size"]) != (num_layers, hidden):
                raise WiringError(
                    f"the server's target has {num_layers} layers x {hidden}, --target "
                    f"{cfg['num_hidden_layers']} x {cfg['hidden_size']}",
                    path="--server",
                    fix="point --target and --server at the same model (or drop --target)",
                )
    else:
        cfg = target_config(opts.target)
        num_layers, hidden = _num_layers(opts, None, cfg), cfg["hidden_size"]
        family = target_family(opts.target)
    n = num_layers
    lay = draft_layouts(opts.draft, num_layers=n, target_hidden_size=hidden,
                        served_by=opts.served_by, family=family)  # fmt: skip
    prestart_check(opts.draft, opts.target)
    # a tap past the family's loop can be neither captured by a server nor served
    top = family.max_capture_index(n) if family is not None else None
    plausible = plausible_layouts(eagle_config_ids(Path(opts.draft))[0], lay.num_aux, n)
    extra = plausible if opts.search else []
    wide = opts.search or lay.declared is None  # every K-subset of a small range is scored
    search_taps = search_range(plausible, lay.num_aux, n, top) if wide else ()
    taps = needed_taps(lay, n, extra=extra, search_taps=search_taps, top=top)
    common = dict(max_new_tokens=opts.max_new_tokens, max_tokens=opts.max_tokens,
                  progress=opts.progress)  # fmt: skip
    engine = "server" if client is not None else _engine(opts, family)
    if engine == "server":
        from sglang_eagle3.doctor.server_capture import capture_from_server

        data = capture_from_server(client, state, prompts, taps,
                                   time_limit=opts.server_time_limit, **common)  # fmt: skip
    elif engine == "sglang":
        data = _capture_with_sglang(opts, taps, prompts, common)
    else:
        from sglang_eagle3.doctor.target_capture import capture_in_process

        try:
            data = capture_in_process(opts.target, prompts, taps, num_layers=n, **common)
        except WiringError as err:  # a prompt too long: name the file it came from
            raise err.with_path(_prompts_name(opts)) from None
    cands = build_candidates(lay, taps, len(taps), n, search=opts.search, positional=False,
                             extra=extra)  # fmt: skip
    source = dict(data.source)
    source["prompts_file"] = _prompts_name(opts)
    source["captured_taps"] = [str(t) for t in taps]
    source["text"] = (
        f"{source['kind']}: {source['engine']}; {source['prompts']} prompts "
        f"({source['prompts_file']}), their greedy continuations ({opts.max_new_tokens} new "
        f"tokens at most), {source['scored_tokens']} tokens scored; taps captured: "
        f"{format_taps(taps)}"
    )
    return Evidence(data, n, lay, family, taps, "captured by the doctor", cands, source,
                    uses_head=False)  # fmt: skip


def _engine(opts: DoctorOptions, family) -> str:
    """auto: real SGLang where it serves the family on a GPU; HF transformers otherwise (on
    CPU, SGLang's start alone takes longer than the HF run)."""
    if opts.engine != "auto":
        return opts.engine
    served = family is not None and family.refused is None
    return "sglang" if served and opts.device != "cpu" else "hf"


def _capture_with_sglang(opts: DoctorOptions, taps, prompts, common):
    import importlib.util

    from sglang_eagle3.doctor.local_server import local_capture_server
    from sglang_eagle3.doctor.server_capture import (
        ServerClient,
        capture_from_server,
        server_capture_state,
    )

    if importlib.util.find_spec("sglang") is None:
        raise WiringError("--engine sglang needs SGLang installed", fix="pip install "
                          "'sglang-eagle3[serve]', or use --engine hf")  # fmt: skip
    with local_capture_server(opts.target, taps, device=opts.device) as url:
        client = ServerClient(url, timeout=opts.request_timeout)
        state = server_capture_state(client)
        data = capture_from_server(client, state, prompts, taps,
                                   time_limit=opts.server_time_limit, **common)  # fmt: skip
    engine = f"SGLang {state.get('sglang')} capture server the doctor started on 127.0.0.1"
    data.source.update(kind="in-process target", engine=f"{engine} (stopped after)")
    return data


def _server_family(state: dict):
    """The server's family row, by name (None: not in the table)."""
    from sglang_eagle3.layout.families import FAMILIES

    name = state.get("family")
    return next((f for f in FAMILIES if f.name == name), None)
