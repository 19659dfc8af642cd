"""How a client asks a capture server for a file instead of JSON rows (pure): the request's
``rid`` starts with RID_PREFIX (hooks/capture_file.py writes ``<capture_dir>/<rid>.safetensors``).
"""

import re

RID_PREFIX = "sglang_eagle3-capture-"
# a file name in the server's capture folder: no separators, no leading dot
RID_RE = re.compile(re.escape(RID_PREFIX) + r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,200}")
