"""The driver: files, coffea executors (iterative, futures, dask), passes over the data."""
