"""Load: world, settings, schedules, dataset access, collation, prefetch; the torch adapter in
torch/."""
