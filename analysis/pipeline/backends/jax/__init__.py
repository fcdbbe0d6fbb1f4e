"""The JAX backend: the reference kernels (soft selection, states, histograms, reverse
sweep), jit-compiled per bucket shape, on whatever device JAX sees."""
