"""A task's data files: :mod:`cache` (generate once from per-split seeds, cached with
parameters and a checksum, locked against concurrent writers) and :mod:`checks` (the
content digest of a file, split disjointness and the integrity checks a loaded file
passes)."""
