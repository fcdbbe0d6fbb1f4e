"""The driver: files, coffea executors (iterative, futures, dask, parsl), passes over the data."""
