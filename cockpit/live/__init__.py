"""The live loop: metrics streams, GPUs, host processes, stop rules, the lot clock, the engine and its snapshot."""
