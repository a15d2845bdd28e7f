"""The published record set (``records/<task>/<preset>/<method>/``): sealed run records
measured by the maintainers, read by the tables beside a user's own
(:mod:`pcgbench.leaderboard.published`; written by ``pcgbench publish``)."""
