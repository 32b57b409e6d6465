"""The records a run is made of and the words they are written in: the pydantic models,
the commit message and its trailers, valid names, the documented JSON shape, and
building many small records at once. Imports nothing of stepstone but `errors`."""
