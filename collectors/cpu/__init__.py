"""CPU samples: the BPF sampler, perf record and the high-rate bursts for short functions."""
