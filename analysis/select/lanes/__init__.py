"""The count-state walk's numba building blocks, written once for every caller.

The YAML engine's kernels (``analysis/pipeline/backends/numba/kernels/``), its one-set
walk and own processors' kernels (:mod:`analysis.select.chainwalk`,
:mod:`analysis.select.singlekernels`) compile with one policy (:mod:`.policy`), on one
lane arithmetic (:mod:`.arith`: a value and its tangents in lanes, specialised at
compile time on the arguments' types), with its buffers (:mod:`.buffers`) and the walk's
steps (:mod:`.steps`). numpy and numba only (and the package's numba cache,
:func:`analysis._compat.numba.guard_cache`, for the policy): no JAX, nothing above
``analysis.select``. Every kernel's cache is keyed by the modules here
(:data:`.policy.SHARED`): a change to any of them compiles every kernel again.
"""
