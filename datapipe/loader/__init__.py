"""Load: world, schedules, dataset access, collation, prefetch; the torch adapter in torch.py."""
