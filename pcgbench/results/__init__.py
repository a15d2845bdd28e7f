"""Results: what a result is and where it lives -- one owner for identity and storage.

* :mod:`~pcgbench.results.identity`: run key, fit key, reference key, code versions and
  staleness (each computed in one function);
* :mod:`~pcgbench.results.layout`: every path under a results directory (records,
  checkpoints, samples, benchmark records, tune results, sweep logs);
* :mod:`~pcgbench.results.record`: the run record's schema, seal and typed view;
* :mod:`~pcgbench.results.store`: reading and writing records (integrity-checked, sealed);
* :mod:`~pcgbench.results.checkpoints`: verified checkpoint files;
* :mod:`~pcgbench.results.benchmarks`: side-by-side benchmark records;
* :mod:`~pcgbench.results.files`: the results and data folders, atomic writes.
"""
