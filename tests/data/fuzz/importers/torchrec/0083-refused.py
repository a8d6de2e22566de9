with open('x') as f:
    EmbeddingBagConfig(name=f.read(), num_embeddings=1, embedding_dim=1)