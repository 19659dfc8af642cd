"""Make a source checkout import the top-level ``kernels/`` folder as ``sglang_eagle3.kernels``.

The wheel installs that folder as ``sglang_eagle3.kernels`` through setuptools' package-dir.
An editable install cannot: setuptools' editable finder maps a nested package only when it
has an ``__init__.py``, and ``kernels/`` must not have one, or a checkout's root on
``sys.path`` would shadow PyPI's ``kernels`` package that SGLang imports.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

NAME = "sglang_eagle3.kernels"


def map_checkout_kernels() -> None:
    here = Path(__file__).resolve().parent
    if NAME in sys.modules or (here / "kernels").is_dir():
        return  # already imported, or an installed wheel that ships the package itself
    folder = here.parent / "kernels"
    if not (folder / "eagle3_fused_fc_kernel.py").is_file():
        return  # not a checkout (site-packages/kernels is PyPI's package, not ours)
    spec = importlib.machinery.ModuleSpec(NAME, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    sys.modules[NAME] = importlib.util.module_from_spec(spec)
