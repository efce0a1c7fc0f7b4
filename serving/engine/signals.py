"""The two signals the serving stack sends a running CPU engine around a blue/green reload.

Another engine now shares these cores (use half the threads) / it is gone (use all of them).
Signals rather than an HTTP endpoint: only the process's owner can send them. A module of
its own so the stack can name them without importing torch.
"""

from __future__ import annotations

import signal

SHARE_SIGNAL = signal.SIGUSR1
ALONE_SIGNAL = signal.SIGUSR2
