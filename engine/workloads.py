"""Published workloads, as data: the MLPerf Training DLRM-DCNv2 (Criteo 1TB) embedding tables.

The 26 categorical features' cardinalities (max_ind_range 40M) and multi-hot sizes, as published with the
MLPerf reference implementation. The dashboard's preset and the benchmark's suite both build on these.
"""

CRITEO_1TB_ROWS: tuple[int, ...] = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938, 155,
    4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36,
)
CRITEO_1TB_MULTI_HOT: tuple[int, ...] = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3,
                                         1, 1)
CRITEO_1TB_EMBEDDING_DIM: int = 128
