from torchrec import EmbeddingBagConfig, DataType, PoolingType
rows: int = 10**6
names = ['a', 'b']
tables = [EmbeddingBagConfig(name=f't_{n}_{i:03d}', num_embeddings=rows // (i + 1), embedding_dim=8 * 2,
                             feature_names=[f'f_{n}'], data_type=DataType.FP16, pooling=PoolingType.MEAN,
                             weight_init_max=0.1) for i, n in enumerate(names)]
