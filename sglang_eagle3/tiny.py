"""`python -m sglang_eagle3.tiny`: build the tiny target and print its directory.

The tiny models live with the other test and demo machinery, in `sglang_eagle3.testing.tiny`.
"""

from sglang_eagle3.testing.tiny.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
