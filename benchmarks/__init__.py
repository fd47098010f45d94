"""Side-by-side benchmarks (programs, not tests)."""
