"""The plans the TorchRec sharding tutorial prints (rank 0's line), copied verbatim from its text.

Source: "Exploring TorchRec sharding" (pytorch.org tutorials; English and Chinese editions).
"""
TUTORIAL_PLANS = {
    "table_wise": (
        "{'': {'large_table_0': ParameterSharding(sharding_type='table_wise', compute_kernel='batched_fused',"
        ' ranks=[0], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_s'
        "izes=[4096, 64], placement=rank:0/cuda:0)])), 'large_table_1': ParameterSharding(sharding_type='tabl"
        "e_wise', compute_kernel='batched_fused', ranks=[1], sharding_spec=EnumerableShardingSpec(shards=[Sha"
        "rdMetadata(shard_offsets=[0, 0], shard_sizes=[4096, 64], placement=rank:1/cuda:1)])), 'small_table_0"
        "': ParameterSharding(sharding_type='table_wise', compute_kernel='batched_fused', ranks=[0], sharding"
        '_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_sizes=[1024, 64], pla'
        "cement=rank:0/cuda:0)])), 'small_table_1': ParameterSharding(sharding_type='table_wise', compute_ker"
        "nel='batched_fused', ranks=[1], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_off"
        'sets=[0, 0], shard_sizes=[1024, 64], placement=rank:1/cuda:1)]))}}'
    ),
    "row_wise": (
        "{'': {'large_table_0': ParameterSharding(sharding_type='row_wise', compute_kernel='batched_fused', r"
        'anks=[0, 1], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_'
        'sizes=[2048, 64], placement=rank:0/cuda:0), ShardMetadata(shard_offsets=[2048, 0], shard_sizes=[2048'
        ", 64], placement=rank:1/cuda:1)])), 'large_table_1': ParameterSharding(sharding_type='row_wise', com"
        "pute_kernel='batched_fused', ranks=[0, 1], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadat"
        'a(shard_offsets=[0, 0], shard_sizes=[2048, 64], placement=rank:0/cuda:0), ShardMetadata(shard_offset'
        "s=[2048, 0], shard_sizes=[2048, 64], placement=rank:1/cuda:1)])), 'small_table_0': ParameterSharding"
        "(sharding_type='row_wise', compute_kernel='batched_fused', ranks=[0, 1], sharding_spec=EnumerableSha"
        'rdingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_sizes=[512, 64], placement=rank:0/cuda:0'
        "), ShardMetadata(shard_offsets=[512, 0], shard_sizes=[512, 64], placement=rank:1/cuda:1)])), 'small_"
        "table_1': ParameterSharding(sharding_type='row_wise', compute_kernel='batched_fused', ranks=[0, 1], "
        'sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_sizes=[512, 6'
        '4], placement=rank:0/cuda:0), ShardMetadata(shard_offsets=[512, 0], shard_sizes=[512, 64], placement'
        '=rank:1/cuda:1)]))}}'
    ),
    "column_wise": (
        "{'': {'large_table_0': ParameterSharding(sharding_type='column_wise', compute_kernel='batched_fused'"
        ', ranks=[0, 1], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], sha'
        'rd_sizes=[4096, 32], placement=rank:0/cuda:0), ShardMetadata(shard_offsets=[0, 32], shard_sizes=[409'
        "6, 32], placement=rank:1/cuda:1)])), 'large_table_1': ParameterSharding(sharding_type='column_wise',"
        " compute_kernel='batched_fused', ranks=[0, 1], sharding_spec=EnumerableShardingSpec(shards=[ShardMet"
        'adata(shard_offsets=[0, 0], shard_sizes=[4096, 32], placement=rank:0/cuda:0), ShardMetadata(shard_of'
        "fsets=[0, 32], shard_sizes=[4096, 32], placement=rank:1/cuda:1)])), 'small_table_0': ParameterShardi"
        "ng(sharding_type='column_wise', compute_kernel='batched_fused', ranks=[0, 1], sharding_spec=Enumerab"
        'leShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_sizes=[1024, 32], placement=rank:0/'
        "cuda:0), ShardMetadata(shard_offsets=[0, 32], shard_sizes=[1024, 32], placement=rank:1/cuda:1)])), '"
        "small_table_1': ParameterSharding(sharding_type='column_wise', compute_kernel='batched_fused', ranks"
        '=[0, 1], sharding_spec=EnumerableShardingSpec(shards=[ShardMetadata(shard_offsets=[0, 0], shard_size'
        's=[1024, 32], placement=rank:0/cuda:0), ShardMetadata(shard_offsets=[0, 32], shard_sizes=[1024, 32],'
        ' placement=rank:1/cuda:1)]))}}'
    ),
    "data_parallel": (
        "{'': {'large_table_0': ParameterSharding(sharding_type='data_parallel', compute_kernel='batched_dens"
        "e', ranks=[0, 1], sharding_spec=None), 'large_table_1': ParameterSharding(sharding_type='data_parall"
        "el', compute_kernel='batched_dense', ranks=[0, 1], sharding_spec=None), 'small_table_0': ParameterSh"
        "arding(sharding_type='data_parallel', compute_kernel='batched_dense', ranks=[0, 1], sharding_spec=No"
        "ne), 'small_table_1': ParameterSharding(sharding_type='data_parallel', compute_kernel='batched_dense"
        "', ranks=[0, 1], sharding_spec=None)}}"
    ),
}
