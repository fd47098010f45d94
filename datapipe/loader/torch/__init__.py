"""The torch adapter, the only part of datapipe that imports torch: DataLoader wiring, segments, tensors."""

from datapipe.loader.torch.dataloader import PIPE_LIMIT, Packed, ShardDataset, WorkerFailure, iterate
from datapipe.loader.torch.process_group import distributed_world
from datapipe.loader.torch.segments import Releases, SegmentBatch, WorkerSegments, forget_segments, slot_table
from datapipe.loader.torch.tensors import can_pin, pinned_buffer, tensor_view, to_tensors

__all__ = [
    "PIPE_LIMIT", "Packed", "Releases", "SegmentBatch", "ShardDataset", "WorkerFailure", "WorkerSegments",
    "can_pin", "distributed_world", "forget_segments", "iterate", "pinned_buffer", "slot_table", "tensor_view",
    "to_tensors",
]
