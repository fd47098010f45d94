"""Image fields decoded into batch tensors: the decoder spec (``datapipe.image``), the per-sample
crop boxes, the Pillow decode into a batch slot, and the CUDA decode."""
