"""Native backends, one module per platform: `cuda` (the optional CUDA module's kernels)."""
