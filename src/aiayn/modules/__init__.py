"""The building blocks of §3, shared by every model type: masks, attention, layers,
embeddings and the key/value cache. Nothing here knows about tasks, data or decoding."""
