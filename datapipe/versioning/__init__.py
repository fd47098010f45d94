"""Datasets as immutable versions: manifests, content-addressed ids, refs, verify and diff."""
