"""EAGLE-3 speculative decoding wired right for SGLang.

Explicit hidden-state layouts, a capture plugin, a launcher and a doctor. This package
root stays import-free (standard library only) so that light tools load quickly.
"""

from sglang_eagle3._checkout import map_checkout_kernels

__version__ = "0.1.0"
# The one SGLang release the hooks are written against (pyproject, setup_env.sh and the
# Dockerfile pin the same; tests/test_deploy.py checks they agree).
SGLANG_VERSION = "0.5.23"

map_checkout_kernels()
