"""Workload statistics measured on a sample of real ids (`python -m engine stats`, docs/stats.md).

sample: streamed readers of Parquet, CSV and NPZ samples; counts: id counts, percentiles, the Zipf fit, per-batch
distinct rows; lru: LRU miss-ratio curves and the SHARDS sampler; replay: the exact LRU replay (misses per cache
size, streamed); compute: the statistics; command: the CLI; generate: a seeded realistic sample for tests and
benchmarks.
"""
