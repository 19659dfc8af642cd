"""`python -m sglang_eagle3.demo`: the seed's bug and its fix on the tiny target.

The demo itself lives with the other test and demo machinery, in `sglang_eagle3.testing.demo`.
"""

from sglang_eagle3.testing.demo import main

if __name__ == "__main__":
    raise SystemExit(main())
