"""Reading a build's source: files listed, schema inferred, partitions cut, each read; one module
per format."""
