args = dict(name='t')
EmbeddingBagConfig(**args, num_embeddings=1, embedding_dim=1)