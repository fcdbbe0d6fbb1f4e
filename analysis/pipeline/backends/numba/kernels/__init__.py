"""The numba backend's compiled loops (float64; numpy, numba and math only)."""
