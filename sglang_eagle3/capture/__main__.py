import sys

from sglang_eagle3.capture.cli import main

sys.exit(main())
