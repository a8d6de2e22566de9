tables = (EmbeddingBagConfig(name='t', num_embeddings=1, embedding_dim=1),)  # a tuple
