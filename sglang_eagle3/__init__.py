"""EAGLE-3 speculative decoding wired right for SGLang.

Explicit hidden-state layouts, a capture plugin, a launcher and a doctor. This package
root stays import-free so that light tools (config readers, the doctor) load quickly.
"""

__version__ = "0.1.0"
