"""The client surfaces: the surface table, the one handler, one module per client protocol's endpoint, model listing."""
