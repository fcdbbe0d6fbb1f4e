"""Data in: reading a chunk's columns from NanoEvents, the column cache across passes,
chunk-fault records, and the seeded NanoAOD-layout generator."""
