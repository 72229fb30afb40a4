"""Test-session settings shared by the unit tests, doctests and notebooks (nbmake).

Notebooks run headless in smoke mode (fewer Monte-Carlo samples and steps) unless the
caller set QAE_LAB_SMOKE / QAE_LAB_HEADLESS already; the kernels nbmake starts inherit this
environment (the browser test starts its JupyterLab without QAE_LAB_HEADLESS).
"""

import os

os.environ.setdefault("QAE_LAB_SMOKE", "1")
os.environ.setdefault("QAE_LAB_HEADLESS", "1")  # nobody at the notebook: wait for background runs

# Property tests run torch code whose first call can be slow on a busy 2-core machine:
# no per-example deadline, so a slow example is never mistaken for a failure.
try:
    from hypothesis import settings
except ImportError:  # hypothesis is a dev extra
    pass
else:
    settings.register_profile("qae_lab", deadline=None)
    settings.load_profile("qae_lab")
