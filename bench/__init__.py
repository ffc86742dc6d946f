"""Speed benchmarks behind ``painted-skin bench`` (retarget, passes, transport, skin,
diffusion) and the GPU benchmark: each prints a ratio against a baseline measured in the
same run. A measuring layer: it may import every layer of the package but the CLI, and
nothing imports it but the CLI and the tools; the extension zip leaves it out
(ARCHITECTURE.md)."""
