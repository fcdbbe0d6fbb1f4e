"""The numba backend: the host (tables, pool, passes) in this folder, the compiled loops
in ``kernels/`` (which import only numpy, numba, math and :mod:`analysis.select.lanes`).

Importing it deletes nothing: numba's stale cache files of the kernels are dropped
before numba reads the first of them (``_numba_cache.drop_stale_once``).
"""

from analysis.pipeline.backends.numba import _numba_cache
from analysis.select.lanes import policy

# Every kernel's cache files checked before numba unpickles them, and the stale ones
# dropped before the first is read (see _numba_cache).
policy.add_cache_hook(_numba_cache.install)
