"""The Arrow half of speculators' data directory (a ``datasets`` save_to_disk), with pyarrow only.

``datasets.Dataset.save_to_disk`` writes ``state.json`` (listing the shard files),
``dataset_info.json`` (the features) and Arrow IPC *stream* files whose schema carries the
features again under the ``huggingface`` metadata key. Reading streams record batches, so
memory stays at one batch whatever the dataset size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
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


_ROWS_PER_BATCH = 1000  # record batch size, as datasets writes them


def write_rows(data_dir: str | Path, ids: Sequence, masks: Sequence) -> None:
    """Write the table as ``datasets`` would (one shard), readable by ``load_from_disk``.

    ``ids`` and ``masks`` hold one int sequence per row (lists or numpy arrays). Rows are
    converted one record batch at a time, so a large index is never held as Python lists.
    """
    import pyarrow as pa

    if len(ids) != len(masks):
        raise ValueError(f"{len(ids)} id rows but {len(masks)} mask rows")
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
    digest = hashlib.sha256()
    with pa.OSFile(str(data_dir / _SHARD), "wb") as sink:
        with pa.ipc.new_stream(sink, schema) as writer:
            for s in range(0, len(ids), _ROWS_PER_BATCH):
                id_rows = [_as_list(r) for r in ids[s : s + _ROWS_PER_BATCH]]
                mask_rows = [_as_list(r) for r in masks[s : s + _ROWS_PER_BATCH]]
                for i, m in zip(id_rows, mask_rows, strict=True):
                    digest.update(json.dumps([i, m]).encode())
                batch = pa.record_batch(
                    [
                        pa.array(id_rows, type=list_type),
                        pa.array(mask_rows, type=list_type),
                        pa.array([len(i) for i in id_rows], type=pa.int64()),
                    ],
                    schema=schema,
                )
                writer.write_batch(batch)
    state = {
        "_data_files": [{"filename": _SHARD}],
        "_fingerprint": digest.hexdigest()[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": "torch",  # prepare-data saves after set_format("torch"); the trainer
        # compares these rows to tensors and fails on plain lists
        "_output_all_columns": False,
        "_split": None,
    }
    (data_dir / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
    (data_dir / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")


def _as_list(row) -> list[int]:
    return row.tolist() if hasattr(row, "tolist") else list(row)
