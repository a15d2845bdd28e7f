"""Everything specific to the PMosFM paper: its transcribed tables (``reported/``), the
sampling protocol (its NFE per benchmark and method), the claims audit, the paper-scale
cost table and the controlled analytic studies.  The harness core and the leaderboard read
them from here; a second paper would be a second package of this shape."""
