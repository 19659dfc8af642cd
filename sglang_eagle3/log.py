"""One logger for the project, visible in every SGLang process.

SGLang configures logging late in its child processes (after plugins load), so a plain
module logger would drop our first lines; this one writes to stderr on its own.
"""

from __future__ import annotations

import logging
import sys

_NAME = "sglang_eagle3"


def get_logger() -> logging.Logger:
    logger = logging.getLogger(_NAME)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("[sglang_eagle3 pid=%(process)d] %(levelname)s %(message)s")
        )
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
