"""Saving and loading a step's values, exactly: the formats by type (tagged JSON,
`.npy`, Parquet, Arrow IPC, pickle as the documented fallback), big values streamed,
and which pickles may be loaded here (trust)."""
