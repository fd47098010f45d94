"""The near_dedupe stage: MinHash signatures, LSH buckets, clusters of near-duplicates, and the
removals they make (docs/guide/building.md#near-duplicates)."""
