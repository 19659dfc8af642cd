"""The Arrow half of speculators' data directory (a ``datasets`` save_to_disk), with pyarrow only.

``datasets.Dataset.save_to_disk`` writes ``state.json`` (listing the shard files),
``dataset_info.json`` (the features) and Arrow IPC *stream* files whose schema carries the
features again under the ``huggingface`` metadata key. Reading streams record batches, so
memory stays at one batch whatever the dataset size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch

from sglang_eagle3.errors import WiringError

META_NAME = "sglang_eagle3_data.json"  # our sidecar: which taps the files store
HS_DIR = "hidden_states"  # hs_{row}.safetensors live here
_FEATURES = {
    "input_ids": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
    "loss_mask": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
    "seq_len": {"dtype": "int64", "_type": "Value"},
}
_SHARD = "data-00000-of-00001.arrow"


def read_rows(data_dir: str | Path) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(row, input_ids [seq] int64, loss_mask [seq] bool)`` for every row, in order."""
    import pyarrow as pa

    data_dir = Path(data_dir)
    state_path = data_dir / "state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        shards = [data_dir / f["filename"] for f in state["_data_files"]]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise WiringError(
            f"not a datasets save_to_disk state file ({err})", path=str(state_path)
        ) from None
    row = 0
    for shard in shards:
        try:
            reader = pa.ipc.open_stream(pa.memory_map(str(shard)))
            names = reader.schema.names
            if "input_ids" not in names:
                raise WiringError(f"Arrow table has columns {names}, no input_ids", path=str(shard))
            for batch in reader:
                ids_col = batch.column("input_ids").to_pylist()
                masks = (
                    batch.column("loss_mask").to_pylist()
                    if "loss_mask" in names
                    else [None] * len(ids_col)
                )
                for ids, mask in zip(ids_col, masks, strict=True):
                    ids_t = torch.tensor(ids, dtype=torch.long)
                    if mask is None:
                        mask_t = torch.ones_like(ids_t, dtype=torch.bool)
                    else:
                        mask_t = torch.tensor(mask, dtype=torch.long).bool()
                    if mask_t.shape != ids_t.shape:
                        raise WiringError(
                            f"row {row}: loss_mask has {mask_t.numel()} entries, input_ids "
                            f"{ids_t.numel()}",
                            path=str(shard),
                        )
                    yield row, ids_t, mask_t
                    row += 1
        except (OSError, pa.ArrowInvalid) as err:
            raise WiringError(
                f"cannot read Arrow data ({err})",
                path=str(shard),
                fix="re-run speculators prepare-data",
            ) from None


def write_rows(data_dir: str | Path, ids: list[list[int]], masks: list[list[int]]) -> None:
    """Write the table as ``datasets`` would (one shard), readable by ``load_from_disk``."""
    import pyarrow as pa

    data_dir = Path(data_dir)
    info = {
        "citation": "",
        "description": "",
        "features": _FEATURES,
        "homepage": "",
        "license": "",
    }
    list_type = pa.list_(pa.int64())
    schema = pa.schema(
        [("input_ids", list_type), ("loss_mask", list_type), ("seq_len", pa.int64())],
        metadata={"huggingface": json.dumps({"info": {"features": _FEATURES}})},
    )
    table = pa.table(
        {
            "input_ids": pa.array(ids, type=list_type),
            "loss_mask": pa.array(masks, type=list_type),
            "seq_len": pa.array([len(i) for i in ids], type=pa.int64()),
        },
        schema=schema,
    )
    with pa.OSFile(str(data_dir / _SHARD), "wb") as sink:
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(table, max_chunksize=1000)
    state = {
        "_data_files": [{"filename": _SHARD}],
        "_fingerprint": hashlib.sha256(json.dumps([ids, masks]).encode()).hexdigest()[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": "torch",  # prepare-data saves after set_format("torch"); the trainer
        # compares these rows to tensors and fails on plain lists
        "_output_all_columns": False,
        "_split": None,
    }
    (data_dir / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    (data_dir / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
