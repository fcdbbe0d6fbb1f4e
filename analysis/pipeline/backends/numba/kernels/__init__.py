"""The numba backend's compiled loops (float64; numpy, numba and math only)."""

from analysis.select.lanes import policy

# The loops here inline one another's helpers across modules: each kernel's numba cache
# is keyed by every module of this folder (and of analysis.select.lanes).
policy.inlines_folder(__file__)
