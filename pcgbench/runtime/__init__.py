"""The process a run lives in: :mod:`environment` (provenance: versions, git, device,
machine load), :mod:`threads` (the thread policy), :mod:`allocator` (glibc malloc
tunables), :mod:`timing`, :mod:`termination` (SIGTERM/SIGINT as partial checkpoints) and
:mod:`log` (messages and progress bars)."""
