"""The run stages, as siblings: one ``pcgbench run`` is :mod:`plan` (what to run and its
identity) -> :mod:`fit` -> :mod:`measure` (sample, time) -> :mod:`evaluate` (score) ->
:mod:`record` (build and seal the record), driven by :mod:`runner` and checked by
:mod:`guard`; they exchange the typed results of :mod:`outcomes`.  :mod:`scoring` is the
pure metric arithmetic they share; :mod:`budget`, :mod:`sweep` (+ :mod:`executor`) and
:mod:`tune` drive many runs.  Nothing here is imported by a plug-in (tasks, methods and
metrics use the top-level modules only)."""
