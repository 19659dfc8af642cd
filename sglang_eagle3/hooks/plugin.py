"""The SGLang plugin: entry point `sglang_eagle3` in group `sglang.srt.plugins`.

SGLang calls `register()` in every process it starts (launcher, scheduler of every TP rank,
detokenizer). Hooks go through SGLang's HookRegistry; the main process also gets the
`GET /sglang_eagle3/capture` route (hooks/capture_route.py). A hook that fails to apply only logs
inside SGLang, so we apply them right away and check that each one is really in place.

Fail closed: when a layout is declared, a hook that is not in place or an SGLang other than
the pinned one ends the process at start with one WiringError line. SGLang catches every
Exception a plugin raises, so the refusal is a SystemExit.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from importlib import metadata

from sglang_eagle3 import SGLANG_VERSION, env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.plan import declared_layout, pd_server
from sglang_eagle3.log import get_logger

logger = get_logger()

FIX_VERSION = f"pip install sglang=={SGLANG_VERSION} (the version sglang-eagle3 is written for)"


def installed_sglang_version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "not installed"


def hook_in_place(target: str, hook) -> bool:
    import pkgutil

    owner_path, attr = target.rsplit(".", 1)
    try:
        fn = getattr(pkgutil.resolve_name(owner_path), attr, None)
    except (ImportError, AttributeError, ValueError):
        return False
    # HookRegistry wraps with functools.wraps and a closure over our hook; walk the
    # __wrapped__ chain and look for our function among the closure cells.
    while fn is not None:
        cells = getattr(fn, "__closure__", None) or ()
        if any(getattr(c, "cell_contents", None) is hook for c in cells):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def refuse(err: WiringError) -> None:
    """End this SGLang process now: one readable line, exit code 2, nothing started."""
    print(f"sglang_eagle3: {err}", file=sys.stderr, flush=True)
    logger.error("refusing to start: %s", err)
    raise SystemExit(2)


def register() -> None:
    from sglang_eagle3.hooks.lifeline import install

    install(is_main_process=multiprocessing.parent_process() is None)
    declared = declared_layout(sys.argv)
    logger.info(
        "plugin loaded in process %s (pid %d)", multiprocessing.current_process().name, os.getpid()
    )
    version = installed_sglang_version()
    if version != SGLANG_VERSION:
        if declared:
            refuse(
                WiringError(
                    f"SGLang {version} is installed, but the hooks that capture the declared "
                    f"layout are written for SGLang {SGLANG_VERSION} only",
                    path=declared,
                    fix=FIX_VERSION,
                )
            )
        logger.warning(
            "SGLang %s is not %s: plugin inactive, no hooks applied; no layout is declared, "
            "so stock SGLang behaviour is kept",
            version,
            SGLANG_VERSION,
        )
        return
    _apply_hooks(declared)


def _apply_hooks(declared: str | None) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_eagle3.hooks.capture import HOOKS as CAPTURE_HOOKS
    from sglang_eagle3.hooks.disk_update import HOOKS as DISK_HOOKS
    from sglang_eagle3.hooks.drafter import HOOKS as DRAFT_HOOKS
    from sglang_eagle3.hooks.drafter_update import HOOKS as UPDATE_HOOKS

    hooks = CAPTURE_HOOKS + DRAFT_HOOKS + UPDATE_HOOKS + DISK_HOOKS
    from sglang_eagle3.hooks import accept_watch_hooks

    if accept_watch_hooks.wanted(sys.argv):
        hooks += accept_watch_hooks.HOOKS
    # The scheduler sees the server's argv: multiprocessing's spawn hands it to the child,
    # and a forked child (CPU harness quick start) inherits it with the hooks already applied.
    from sglang_eagle3.hooks import adaptive_steps

    if adaptive_steps.wanted(sys.argv):
        hooks += adaptive_steps.HOOKS
    if pd_server(sys.argv):  # PD: the decode side takes only prefills serving its plan
        from sglang_eagle3.hooks.pd_plan import HOOKS as PD_HOOKS

        hooks += PD_HOOKS
    if os.environ.get(env_names.CAPTURE_DIR):  # capture to files: the scheduler writes them
        from sglang_eagle3.hooks.capture_file import HOOKS as FILE_HOOKS

        hooks += FILE_HOOKS
    # The HTTP server and the request checks run in SGLang's main process only; the
    # schedulers and the detokenizer (spawned children) would import the HTTP stack for nothing.
    if multiprocessing.parent_process() is None:
        from sglang_eagle3.hooks.capture_route import HOOKS as ROUTE_HOOKS
        from sglang_eagle3.hooks.freeze_gc import HOOKS as FREEZE_HOOKS
        from sglang_eagle3.hooks.request_guard import HOOKS as GUARD_HOOKS

        hooks += ROUTE_HOOKS + GUARD_HOOKS + FREEZE_HOOKS
    for target, hook, hook_type in hooks:
        HookRegistry.register(target, hook, hook_type)
    # Idempotent: SGLang calls it again after all plugins ran; targets already patched
    # are skipped, so our hooks are in place before we check them.
    HookRegistry.apply_hooks()
    missing = [t for t, h, _ in hooks if not hook_in_place(t, h)]
    if not missing:
        logger.info("hooks verified in place: %s", ", ".join(t for t, _, _ in hooks))
        return
    if declared:
        refuse(
            WiringError(
                f"hooks not in place: {', '.join(missing)}; without them the declared layout "
                "cannot be guaranteed",
                path=declared,
                fix=f"check that SGLang {SGLANG_VERSION} is installed unmodified (SGLang's log "
                "says why a hook failed to apply)",
            )
        )
    logger.error(
        "hooks NOT in place: %s. No layout is declared, so stock SGLang behaviour is kept.",
        ", ".join(missing),
    )
