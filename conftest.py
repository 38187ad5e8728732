"""Session-wide test settings (this file sits at the root so that it covers tests/ and notebooks/ alike).

The suite runs on two pytest-xdist workers, and nbval starts a Jupyter kernel per notebook. A kernel's torch
would use every core, so two kernels on a 2-core machine ask for four threads and spend their time
handing work back and forth (a notebook cell measured 6x slower that way). Child processes inherit the
environment, so one thread per kernel is set here before any worker starts; ``OMP_NUM_THREADS`` already
set in the environment wins.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
