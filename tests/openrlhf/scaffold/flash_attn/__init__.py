"""Test scaffolding: an import stub for flash-attn (no CPU build). OpenRLHF imports its padding
helpers at module level and calls them only with --ds.packing_samples, which the CPU tests leave off."""
