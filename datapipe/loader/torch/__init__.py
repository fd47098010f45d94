"""The torch adapter, the only part of datapipe that imports torch: DataLoader wiring, segments,
tensors.

What the rest of the loader and users call is here; the parts (and the constants tests adjust) are
in the modules: dataloader.py, segments.py, tensors.py, process_group.py.
"""

from datapipe.loader.torch.dataloader import ShardDataset, iterate
from datapipe.loader.torch.process_group import distributed_world

__all__ = ["ShardDataset", "distributed_world", "iterate"]
