"""The numba backend: the host (tables, pool, passes) in this folder, the compiled loops
in ``kernels/`` (which import only numpy, numba, math and :mod:`analysis.select.lanes`).

Each kernel's numba cache is keyed by every module of ``kernels/`` and of
:mod:`analysis.select.lanes` (``kernels/__init__.py``,
:func:`analysis.select.lanes.policy.depends`).
"""
