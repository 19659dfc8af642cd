import sys

from sglang_eagle3.tune.cli import main

sys.exit(main())
