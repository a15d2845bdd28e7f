"""What a method's fit is built from: :mod:`loop` (the shared training loop: schedules,
EMA, checkpoints, resume, termination), :mod:`state` (what a checkpoint holds),
:mod:`preconditioning` (the charts' whitening), :mod:`network` (the one wrapper every
learned-network call goes through, so NFE is counted) and :mod:`capture` (CUDA-graph
capture of a launch-bound sampler)."""
