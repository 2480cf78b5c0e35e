"""lowbit gateware: one Amaranth component per block, plus the accelerator top."""
