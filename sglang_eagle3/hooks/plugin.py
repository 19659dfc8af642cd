"""The SGLang plugin: entry point `sglang_eagle3` in group `sglang.srt.plugins`.

SGLang calls `register()` in every process it starts (launcher, scheduler of every TP rank,
detokenizer). Hooks go through SGLang's HookRegistry. A hook that fails to apply only logs
inside SGLang, so we apply them right away and check that each one is really in place.
"""

from __future__ import annotations

import multiprocessing
import os

from sglang_eagle3.log import get_logger

logger = get_logger()


def _hook_in_place(target: str, hook) -> bool:
    import pkgutil

    owner_path, attr = target.rsplit(".", 1)
    fn = getattr(pkgutil.resolve_name(owner_path), attr, None)
    # HookRegistry wraps with functools.wraps and a closure over our hook; walk the
    # __wrapped__ chain and look for our function among the closure cells.
    while fn is not None:
        cells = getattr(fn, "__closure__", None) or ()
        if any(getattr(c, "cell_contents", None) is hook for c in cells):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_eagle3.hooks.capture import HOOKS as CAPTURE_HOOKS
    from sglang_eagle3.hooks.drafter import HOOKS as DRAFT_HOOKS

    HOOKS = CAPTURE_HOOKS + DRAFT_HOOKS

    logger.info(
        "plugin loaded in process %s (pid %d)", multiprocessing.current_process().name, os.getpid()
    )
    for target, hook, hook_type in HOOKS:
        HookRegistry.register(target, hook, hook_type)
    # Idempotent: SGLang calls it again after all plugins ran; targets already patched
    # are skipped, so our hooks are in place before we check them.
    HookRegistry.apply_hooks()
    missing = [t for t, h, _ in HOOKS if not _hook_in_place(t, h)]
    if missing:
        logger.error(
            "hooks NOT in place: %s. Hidden-state capture falls back to stock SGLang "
            "behaviour; check the SGLang version (this plugin is written for 0.5.23).",
            ", ".join(missing),
        )
    else:
        logger.info("hooks verified in place: %s", ", ".join(t for t, _, _ in HOOKS))
