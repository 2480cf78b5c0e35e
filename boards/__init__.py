"""lowbit board targets, toolchain wrappers, host driver and command line."""
