"""Built-in methods; importing this package registers them in ``METHODS``."""

from pcgbench.methods import (  # noqa: F401
    advno,
    ccfm,
    cocogen,
    dflow,
    diffusionpde,
    eci,
    ffm,
    fluidflow,
    fm_ot,
    pbfm,
    pcfm,
    pcft,
    pidm,
    pmosfm,
)
