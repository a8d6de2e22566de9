async def f():
    return [EmbeddingBagConfig(name='t', num_embeddings=1, embedding_dim=1) async for i in g()]