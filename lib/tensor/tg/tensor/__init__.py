"""tg Tensor: a lazy tensor whose graphs compile into fused kernels."""
