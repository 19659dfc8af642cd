"""`python -m sglang_eagle3.layout stamp ...`: an entry shim; the work is capture/stamp.py's."""

import sys

from sglang_eagle3.capture.stamp import main

sys.exit(main(sys.argv[1:]))
